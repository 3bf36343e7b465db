#!/usr/bin/env python3
"""Estimated token lengths of the GSM8K test questions, for the simulator's gsm8k workload.

Usage: tools/gsm8k_prompt_lengths.py GSM8K_TEST_JSONL > data/workload/gsm8k_prompt_lengths.csv

Writes one row per test question, in file order: question_tokens,answer_tokens.
There is no LLaDA tokenizer here, so tokens are estimated from characters:
    tokens(text) = max(1, floor(len(text) / 4 + 0.5))
with len counting Unicode code points (about 4 characters per BPE token for English).
The estimate is taken on the text as it appears in a few-shot prompt:
    question_tokens = tokens("Question: " + question + "\nAnswer:")
    answer_tokens   = tokens(" " + answer + "\n\n")
(the answer in full, calculator annotations and the "#### N" line included). A k-shot
prompt is k exemplars (question + answer) followed by the question; the simulator charges
each exemplar the mean of question_tokens + answer_tokens over the file (see
data/workload/README.md). Plain python3, no dependencies; the output is deterministic.
"""
import json
import sys


def tokens(text):
    # floor(x + 0.5), not round(): Python's round() rounds halves to even.
    return max(1, int(len(text) / 4.0 + 0.5))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gsm8k_prompt_lengths.py GSM8K_TEST_JSONL")
    out = ["question_tokens,answer_tokens"]
    with open(sys.argv[1], encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                q, a = row["question"], row["answer"]
            except (ValueError, KeyError) as e:
                sys.exit(f"{sys.argv[1]}:{lineno}: {e}")
            out.append(f"{tokens('Question: ' + q + chr(10) + 'Answer:')},"
                       f"{tokens(' ' + a + chr(10) + chr(10))}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
