"""An agent that sends a value of its environment (not one whose name says
it is a secret) to the model, and prints the answer.
Usage: env_agent.py"""

import os

import openai

greeting = os.environ["TEAM_GREETING"]
reply = openai.OpenAI().chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": f"Say hi to {greeting}"}])
print(reply.choices[0].message.content)
