#!/usr/bin/env python3
"""Signs sub-agent affinity hints with TensorRT-LLM's own function, for the tests.

    python3 scripts/subagent-auth-vectors.py /path/to/TensorRT-LLM > test/fixtures/subagent-auth.json

Runs _sign_subagent_affinity from tensorrt_llm/serve/disagg_auth.py (as in
NVIDIA/TensorRT-LLM PR #19175, "Authenticate disaggregated subagent
affinity") unmodified, behind stand-ins for what it reads: the request (model,
disaggregated_params.request_type and disagg_request_id), the worker role (an
enum member's .name), get_request_conversation_id and the header constant.
No code of the engine is kept here: give it a checkout (or a folder holding
that file).
"""
import ast
import enum
import hashlib
import hmac
import json
import sys
import types
from pathlib import Path


def main():
    path = Path(sys.argv[1]) / "tensorrt_llm" / "serve" / "disagg_auth.py"
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_sign_subagent_affinity")
    role_enum = enum.Enum("ServerRole", ["CONTEXT", "GENERATION"])
    ns = {"hashlib": hashlib, "hmac": hmac, "json": json, "_SIGNATURE_PREFIX": "sha256=", "SUBAGENT_AFFINITY_HEADER": "x-trtllm-subagent-affinity-id",
          "UCompletionRequest": object, "ServerRole": role_enum, "get_request_conversation_id": lambda r: r.conversation_id}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), ns)
    sign = ns["_sign_subagent_affinity"]
    cases = [
        ("context request", "secret-key-1", "llama", "conv-42", "parent-7", "context_only", 1234),
        ("generation request", "secret-key-1", "llama", "conv-42", "parent-7", "generation_only", 1234),
        ("non-ASCII ids and model", "k\u00e9y", "mod\u00e8le-\u4e2d", "conv-\U0001F600", "parent-\u00fc", "context_only", None),
        ("no conversation id", "secret-key-1", "llama", None, "parent-7", "context_only", 9),
        ("a 63-bit request id past 2^53", "secret-key-1", "llama", "conv-42", "parent-7", "generation_only", 1757000000000123456),
        ("DEL and a conversation id with spaces", "secret-key-1", "a\x7fb", " conv 42 ", "parent-7", "context_only", 5),
    ]
    out = {"note": __doc__.strip().splitlines()[0], "cases": []}
    for what, key, model, conv, affinity, request_type, disagg_id in cases:
        params = types.SimpleNamespace(request_type=request_type, disagg_request_id=disagg_id)
        request = types.SimpleNamespace(model=model, conversation_id=conv, disaggregated_params=params)
        role = role_enum.CONTEXT if request_type == "context_only" else role_enum.GENERATION
        out["cases"].append({"what": what, "key": key, "model": model, "conversation_id": conv, "affinity_id": affinity, "request_type": request_type, "disagg_request_id": None if disagg_id is None else str(disagg_id), "signature": sign(key, request, role, affinity)})
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
