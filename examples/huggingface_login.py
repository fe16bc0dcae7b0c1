"""The HuggingFace libraries on two nodes, logged in with a token that never shows.

    HF_TOKEN=hf_... python examples/huggingface_login.py

Needs the huggingface extra (not in the demo's set-up): `.venv/bin/python -m pip install -e '.[huggingface]'`
(from the repository root; `python3 dev.py test` installs it too).

The huggingface plugin exports the token as the secret `HF_TOKEN` of the pool's image: every
HuggingFace library on the workers picks it up, and skyhive redacts it from output, events and logs.
The function below even prints it: what reaches your terminal is `***`. (Without `HF_TOKEN` a
placeholder token is used; nothing here talks to the Hub.)
"""

from __future__ import annotations

import os

import skyhive as sky


@sky.compute
def check_login(sentences: list[str]) -> dict:
    from huggingface_hub import get_token
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    token = get_token()
    print(f"the token huggingface_hub sees here: {token}")  # redacted before it leaves the node

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))  # a local tokenizer, no download
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(sentences, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    return {
        "node": sky.instance_info().node,
        "logged_in": token is not None,
        "token_from_env": token == os.environ.get("HF_TOKEN"),
        "tokens": tokenizer.encode(sentences[0]).tokens,
    }


def main() -> list[dict]:
    token = os.environ.get("HF_TOKEN") or "hf_placeholder_for_the_example_0123456789"
    sentences = ["skyhive runs functions on a pool", "the token stays secret"]
    with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.huggingface(token=token)]) as pool:
        results = check_login(sentences) @ pool
    for r in results:
        print(f"node {r['node']}: logged in={r['logged_in']} (token from HF_TOKEN: {r['token_from_env']}) "
              f"tokens={r['tokens']}")
    return results


if __name__ == "__main__":
    main()
