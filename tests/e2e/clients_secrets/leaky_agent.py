"""An agent that leaks its secrets everywhere it can: the key given on its
command line and the token in its environment go into its request, its
output and a file it writes; it reads a config that repeats a value of the
.env beside it. Usage: leaky_agent.py --api-key KEY"""

import json
import os
import sys
from pathlib import Path

import openai

key = sys.argv[sys.argv.index("--api-key") + 1]
token = os.environ["MY_SERVICE_TOKEN"]
config = json.loads(Path("config.json").read_text())
print(f"using key {key} and token {token}")
print(f"debug: key={key} token={token}", file=sys.stderr)
client = openai.OpenAI(api_key=key)
reply = client.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user",
               "content": f"My key is {key}, my token {token}, the password {config['password']}"}])
answer = reply.choices[0].message.content or ""
Path("answer.txt").write_text(f"{answer}\nkey={key}\ntoken={token}\n")
print(answer)
# Files a snapshot leaves out, made by the agent: never compared, never stored
# (a name it leaves out), or compared by hash only (a binary file).
Path(".env.cache").write_text(f"TOKEN={token}\n")
Path("out.bin").write_bytes(bytes(range(32)))
