"""An EBNF grammar as the output type: a tiny command language the model must follow.

    python cookbook/ebnf_grammar.py
"""

from __future__ import annotations

import surecall

COMMANDS = surecall.Grammar.from_ebnf(
    """
    start   ::= command (';' ' ' command){0,2};
    command ::= move | turn | say;
    move    ::= 'move ' #'[1-9]' ' steps';
    turn    ::= 'turn ' ('left' | 'right');
    say     ::= 'say "' #'[a-zA-Z !]{1,20}' '"';
    """
)


def main(model=None) -> str:
    model = surecall.load_model() if model is None else model
    messages = [
        {"role": "system", "content": "You control a robot with commands like: move 3 steps; turn left; say \"hi\""},
        {"role": "user", "content": "Walk forward a little, turn right and greet me."},
    ]
    program = surecall.generate(model, messages, COMMANDS, max_tokens=40)
    print(program)
    return program


if __name__ == "__main__":
    main()
