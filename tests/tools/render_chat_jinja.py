#!/usr/bin/env python3
"""Reference chat renderings: random conversations rendered with a model's
tokenizer_config.json chat template by Jinja2, set up as transformers sets it
up (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, tojson).

usage: render_chat_jinja.py MODEL_DIR SEED N > chats.jsonl   (needs jinja2)
"""
import json
import random
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env


PARTS = ["Hello", "What is 2+2?", "", " ", "\n", "\n\nx\n\n", "  spaced  ", "<think>", "</think>",
         "<think>\nreason\n</think>\n\nanswer", "<think>r</think>", "a</think>b</think>c",
         "<tool_response>\nok\n</tool_response>", "<|im_end|>", "你好", "It's", "\tTab",
         "line1\nline2", "\u00a0nbsp\u3000", "end\n"]


def content(rng):
    return "".join(rng.choice(PARTS) for _ in range(rng.randint(0, 4)))


def conversation(rng):
    roles = ["user", "assistant", "system", "tool"]
    msgs = []
    if rng.random() < 0.4:
        msgs.append({"role": "system", "content": content(rng)})
    for _ in range(rng.randint(1, 6)):
        msgs.append({"role": rng.choices(roles, [5, 4, 1, 2])[0], "content": content(rng)})
    return msgs


def main():
    model, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cfg = json.load(open(model + "/tokenizer_config.json", encoding="utf-8"))
    tpl = environment().from_string(cfg["chat_template"])
    rng = random.Random(seed)
    for i in range(n):
        msgs = conversation(rng)
        kw = {"messages": msgs, "add_generation_prompt": rng.random() < 0.7}
        if rng.random() < 0.6:
            kw["enable_thinking"] = rng.random() < 0.5
        text = tpl.render(bos_token=cfg.get("bos_token"), eos_token=cfg.get("eos_token"), **kw)
        line = dict(id=f"c{i}", text=text, **kw)
        print(json.dumps(line, ensure_ascii=False))


if __name__ == "__main__":
    main()
