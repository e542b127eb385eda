"""The worker: a line every two seconds with message.txt's text, and every
line typed at `kubegate dev` echoed back."""

import pathlib
import select
import sys

HERE = pathlib.Path(__file__).resolve().parent


def message():
    try:
        return (HERE / "message.txt").read_text().strip()
    except OSError as e:
        return f"(no message: {e.strerror})"


print(f"worker started (message: {message()})")
ticks = 0
reading = True
while True:
    ready, _, _ = select.select([sys.stdin] if reading else [], [], [], 2.0)
    if ready:
        line = sys.stdin.readline()
        if line:
            print(f"you typed: {line.strip()}")
        else:
            reading = False  # end of input: ticks only
    else:
        ticks += 1
        print(f"tick {ticks}: {message()}")
