#!/usr/bin/env python3
"""Records the KV-event wire variants the gateway's tests replay, byte for byte.

    python3 scripts/kv-event-fixtures.py > test/fixtures/kv-events/wire.json

The engines encode with msgspec (vLLM) or msgpack-python (TensorRT-LLM); neither
is installed here (PyPI is out of reach), so this file carries its own msgpack
writer with msgspec's choices: the smallest integer format, floats as float64,
str/bin/array/map by size, struct fields in declaration order with the tag
first, fields at their default left out (kv-events reference section 2). It
shares no code with the gateway's decoder (@msgpack/msgpack), so the tests
check the decoder against bytes it did not write. TensorRT-LLM's HTTP bodies are
written by Python's json, as `KVCacheEventSerializer` output is served.
"""
import hashlib
import json
import struct


def pack(v):
    """msgpack bytes of v, msgspec's way."""
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 0x80:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack(">b", v)
        if 0 <= v <= 0xFF:
            return b"\xcc" + struct.pack(">B", v)
        if 0 <= v <= 0xFFFF:
            return b"\xcd" + struct.pack(">H", v)
        if 0 <= v <= 0xFFFFFFFF:
            return b"\xce" + struct.pack(">I", v)
        if 0 <= v <= 0xFFFFFFFFFFFFFFFF:
            return b"\xcf" + struct.pack(">Q", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode("utf-8")
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        if len(b) <= 0xFF:
            return b"\xd9" + bytes([len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, bytes):
        return b"\xc4" + bytes([len(v)]) + v
    if isinstance(v, (list, tuple)):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(type(v))


BLOCK = 4
P = list(range(1001, 1017))  # four blocks
Q = list(range(2001, 2017))
R = list(range(3001, 3017))
TS = 1764547200.25
BIG = [0xF000000000000001 + i for i in range(4)]  # uint64 beyond 2^53: a double would merge them
SHA = [hashlib.sha256(b"block-%d" % i).digest() for i in range(4)]


def stored_map(hashes, tokens, parent=None, lora_id=None, lora_name=None, extra_keys=None):
    e = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
         "block_size": BLOCK, "lora_id": lora_id, "medium": "GPU", "lora_name": lora_name}
    if extra_keys is not None:
        e["extra_keys"] = extra_keys
    return e


def batch_map(events, rank=0):
    return {"ts": TS, "events": events, "data_parallel_rank": rank}


batches = {
    "vllm_map_stored": ("vLLM >= mid-2026: map EventBatch, map BlockStored, int hashes", batch_map([stored_map([11, 12, 13, 14], P)])),
    "vllm_array_stored": ("older vLLM: positional EventBatch and BlockStored", [TS, [["BlockStored", [11, 12, 13, 14], None, P, BLOCK, None, "GPU"]], 0]),
    "vllm_map_bytes_stored": ("vLLM sha256 block hashes as bytes", batch_map([stored_map(SHA, P)])),
    "trtllm_array_stored": ("TensorRT-LLM stream: positional, uint64 hashes, token ids as strings", [TS, [["BlockStored", BIG, None, [str(t) for t in P], BLOCK, None, "GPU", None]], 0]),
    "vllm_map_removed": ("map BlockRemoved of the second block (its descendants go with it)", batch_map([{"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU"}])),
    "vllm_array_removed": ("positional BlockRemoved", [TS, [["BlockRemoved", [12], "GPU"]], 0]),
    "vllm_map_bytes_removed": ("BlockRemoved with a byte hash", batch_map([{"type": "BlockRemoved", "block_hashes": [SHA[1]], "medium": "GPU"}])),
    "trtllm_array_removed": ("positional BlockRemoved with a uint64 hash", [TS, [["BlockRemoved", [BIG[1]], "GPU"]], 0]),
    "map_cleared": ("map AllBlocksCleared", batch_map([{"type": "AllBlocksCleared"}])),
    "array_cleared": ("positional AllBlocksCleared", [TS, [["AllBlocksCleared"]], 0]),
    "vllm_map_salted": ("a salted prompt: cache_salt in its first block's extra_keys", batch_map([stored_map([21, 22, 23, 24], Q, extra_keys=[["tenant-salt"], None, None, None])])),
    "vllm_map_lora": ("a LoRA prompt: lora_name, and the name in every block's extra_keys", batch_map([stored_map([31, 32, 33, 34], Q, lora_id=1, lora_name="sql-lora", extra_keys=[["sql-lora"]] * 4)])),
    "vllm_map_rank1": ("DP rank 1's stream", batch_map([stored_map([41, 42, 43, 44], P)], rank=1)),
    "chain_p": ("sequence test, batch A", batch_map([stored_map([51, 52, 53, 54], P)])),
    "chain_q": ("sequence test, batch B", batch_map([stored_map([61, 62, 63, 64], Q)])),
    "chain_r": ("sequence test, batch C", batch_map([stored_map([71, 72, 73, 74], R)])),
}

# A real conversation's prompt, as the engine's own tokenizer makes it (Qwen2.5's
# fixture tokenizer; ids from the Rust tokenizers, test/fixtures/tokenizers), stored
# by the engine in blocks of 16 tokens (vLLM's default block size).
REF = json.load(open("test/fixtures/tokenizers/qwen2.5/reference.json"))
LONG = next(c for c in REF["cases"] if c["name"] == "chat: long multi-turn")["ids"]
QWEN_BLOCK = 16
full = len(LONG) // QWEN_BLOCK
batches["qwen_long_turn_stored"] = ("a 2,000-token chat's prompt in Qwen2.5's ids, 16-token blocks", batch_map([dict(stored_map(
    [100000 + i for i in range(full)], LONG[: full * QWEN_BLOCK]), block_size=QWEN_BLOCK)]))

out = {
    "note": "Recorded by scripts/kv-event-fixtures.py (an independent msgpack writer with msgspec's encoding choices); do not edit by hand.",
    "tokensPerBlock": BLOCK,
    "prompts": {"P": P, "Q": Q, "R": R},
    "msgpack": {name: {"what": what, "hex": pack(v).hex()} for name, (what, v) in batches.items()},
}
out["msgpack"]["garbage"] = {"what": "not msgpack (0xc1 is never used)", "hex": "c1c1c1"}


def trt_block(h, tokens):
    return {"type": "stored_block", "block_hash": h, "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0} for t in tokens],
            "cache_level": 0, "priority": 35, "mm_keys": []}


def trt(event_id, data, rank=None):
    e = {"event_id": event_id, "data": data, "window_size": 4096}
    if rank is not None:
        e["attention_dp_rank"] = rank
    return e


http = {
    "stored": [trt(0, {"type": "created", "num_blocks_per_cache_level": [4096, 0]}, 0),
               trt(1, {"type": "stored", "parent_hash": None, "blocks": [trt_block(BIG[0], P[0:4]), trt_block(BIG[1], P[4:8])]}, 0),
               trt(2, {"type": "stored", "parent_hash": BIG[1], "blocks": [trt_block(BIG[2], P[8:12]), trt_block(BIG[3], P[12:16])]}, 0),
               trt(0, {"type": "stored", "parent_hash": None, "blocks": [trt_block(81, Q[0:4])]}, 1)],
    "updated_and_removed": [trt(3, {"type": "updated", "block_hash": BIG[0], "cache_level": {"type": "event_diff", "new_value": 1, "old_value": 0}, "priority": None}, 0),
                            trt(4, {"type": "removed", "block_hashes": [BIG[1]]}, 0)],
    "gap": [trt(9, {"type": "stored", "parent_hash": None, "blocks": [trt_block(91, R[0:4])]}, 0)],
}
out["http"] = {name: json.dumps(v) for name, v in http.items()}
out["http"]["not_a_list"] = '{"detail": "Not Found"}'
print(json.dumps(out, indent=1))
