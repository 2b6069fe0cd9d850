"""A regular expression as the output type: the answer always matches the pattern.

    python cookbook/regex_phone.py
"""

from __future__ import annotations

import surecall

PHONE = surecall.Regex(r"\+1 \([0-9]{3}\) [0-9]{3}-[0-9]{4}")


def main(model=None) -> str:
    model = surecall.load_model() if model is None else model
    messages = [{"role": "user", "content": "Our office line is 415 555 0132. Write it in international format."}]
    number = surecall.generate(model, messages, PHONE, max_tokens=20)
    print(number)
    return number


if __name__ == "__main__":
    main()
