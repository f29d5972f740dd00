"""TLS interception for recording: a certificate authority made for one run
alone, leaf certificates minted per SNI name (RFC 6066 §3) for the provider
hosts wiretape terminates TLS for, and the CA bundle the agent's process is
told to trust.
"""
