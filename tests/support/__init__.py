"""Test support: a byte-exact raw HTTP/1.1 upstream, SDK client scripts,
and helpers to drive the wiretape CLI from tests."""
