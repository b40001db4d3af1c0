#!/usr/bin/env python3
"""Records KV events as the engines' own code writes them, for the tests.

    pip install msgspec prometheus_client
    python3 scripts/engine-event-fixtures.py --trtllm /path/to/TensorRT-LLM --sglang /path/to/sglang \
        --vllm /path/to/vllm > test/fixtures/kv-events/engines.json

Each engine's fixtures are recorded only when its checkout is given; --merge FILE keeps
the others from an earlier recording (so one engine can be re-recorded alone).

Unlike kv-event-fixtures.py (this project's own writer of each wire variant),
every payload here is produced by the engine's unmodified source, run behind
small stand-ins for what it imports (its C++ bindings, its logger); no code of
the engines is kept in this repository: give it a checkout.

  TensorRT-LLM, NVIDIA/TensorRT-LLM
    tensorrt_llm/_utils.py, class KVCacheEventSerializer
      (followed at commit ed53795b33fc139493f762a1c6c53f691cf52d38): the JSON
      that /kv_cache_events serves. The stand-ins are the binding classes it
      dispatches on by name (KVCacheStoredData, KVCacheStoredBlockData, ...),
      holding what the C++ KV cache manager fills in; a stored event whose last
      block is not yet full holds that block's tokens as they are (the
      stand-in builds that block: this shows how the serializer writes one,
      not that the C++ manager emits one in a given release).
    tensorrt_llm/serve/kv_event_fanout.py, class KvEventFanout
      (followed at commit 48f2db0bbf03661a285df62512a5aecc5b2fa490): what its
      subscribers receive and what its HTTP buffer drains, fed the serializer's
      events with an event-id gap (the synthetic {"type": "all_cleared"}).

    The same serializer writes variable-sliding-window (VSWA) events: one
      radix tree per attention window, each event naming its window_size.

    tensorrt_llm/_torch/pyexecutor/kv_cache_events.py, the wire structs
      KVEventBatch, BlockStored (with mm_keys of MultimodalKey), BlockRemoved
      (followed at commit 13599e98c71c6903a2d1a240d23be002c2109821): KV cache
      manager v2's streaming events (PR #17023), one ZeroMQ stream per DP rank,
      consecutive blocks coalesced into one event, each built as its
      _StreamingEventSource.drain_events builds them, encoded with msgspec's
      msgpack Encoder as its ZmqEventPublisher does. Hashes stand in for the low
      64 bits of the radix block keys.

  vLLM, vllm-project/vllm
    vllm/distributed/kv_events.py, the structs KVEventBatch, BlockStored,
      BlockRemoved, AllBlocksCleared (followed at commit
      0181ea3173e53eea8cf04a86891488e3dc89bb34), encoded with msgspec's msgpack
      Encoder as its ZmqEventPublisher encodes them. The events are the ones
      vllm/v1/core/block_pool.py writes for a hybrid model (cache_full_blocks:
      one BlockStored per KV-cache group with its group_idx, medium GPU, no
      kind; an evicted cached block: BlockRemoved with its group_idx). Block
      hashes are stand-ins (the low 64 bits of a sha256 over the parent and the
      tokens, as maybe_convert_block_hash keeps them): the gateway keys blocks
      on their tokens and takes a hash only as the block's name.

  SGLang, sgl-project/sglang
    python/sglang/srt/disaggregation/kv_events.py, the structs KVEventBatch,
      BlockStored, BlockRemoved, AllBlocksCleared (followed at commit
      006d053f182f9b488d2bd841afa06d5f9120a258), encoded with msgspec's
      msgpack Encoder as its ZmqEventPublisher encodes them (no DP rank in the
      batch: the rank is the publisher's port offset).
    python/sglang/srt/metrics/collector.py (commit
      00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538): the load gauges
      sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage with
      the scheduler's labels (model_name, engine_type, tp_rank, pp_rank,
      moe_ep_rank, dp_rank), written by prometheus_client as its /metrics does.

Needs msgspec and prometheus_client (for SGLang).

Output: one JSON object, each fixture with what it shows and the JSON text the
engine writes (Python's json.dumps, as trtllm-serve returns it).
"""
import argparse
import ast
import asyncio
import json
import sys
import types
from pathlib import Path


def load_class(path, name, namespace):
    """The class `name` of the Python file at `path`, executed alone in `namespace` (its module's other imports untouched)."""
    tree = ast.parse(Path(path).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
    exec(code, namespace)
    return namespace[name]


def binding(name, **fields):
    """A stand-in for one of the executor bindings' classes (the serializer reads type(x).__name__ and attributes)."""
    return type(name, (), {})() if not fields else type(name, (), dict(fields))()


def token(t):
    return binding("UniqueToken", token_id=t, token_extra_id=0)


def block(h, tokens):
    return binding("KVCacheStoredBlockData", block_hash=h, tokens=[token(t) for t in tokens], cache_level=0, priority=35)


def event(event_id, data, window_size=4096, rank=None):
    return binding("KVCacheEvent", event_id=event_id, data=data, window_size=window_size, attention_dp_rank=rank)


def stored(parent, blocks):
    return binding("KVCacheStoredData", parent_hash=parent, blocks=blocks)


def removed(hashes):
    return binding("KVCacheRemovedData", block_hashes=hashes)


def created(window_size=4096):
    return binding("KVCacheCreatedData", num_blocks_per_cache_level=[4096, 0])


def sglang(root):
    """SGLang's ZeroMQ batches (msgspec, as its publisher encodes them) and its /metrics page."""
    import typing

    import msgspec
    import prometheus_client

    ns = {"msgspec": msgspec, "Any": typing.Any, "Optional": typing.Optional, "Union": typing.Union}
    path = root / "python" / "sglang" / "srt" / "disaggregation" / "kv_events.py"
    tree = ast.parse(path.read_text())
    wanted = ["EventBatch", "KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared", "KVEventBatch"]
    body = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)
    encoder = msgspec.msgpack.Encoder()
    stored = ns["KVEventBatch"](ts=1.5, events=[ns["BlockStored"](block_hashes=[2**63 + 7, 9], parent_block_hash=None, token_ids=[61, 62, 63, 64, 65, 66, 67, 68], block_size=4, lora_id=None)])
    removed = ns["KVEventBatch"](ts=2.5, events=[ns["BlockRemoved"](block_hashes=[9])])
    cleared = ns["KVEventBatch"](ts=3.5, events=[ns["AllBlocksCleared"]()])

    registry = prometheus_client.CollectorRegistry()
    labels = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"]
    gauges = {name: prometheus_client.Gauge(name, doc, labelnames=labels, registry=registry) for name, doc in [
        ("sglang:num_running_reqs", "The number of running requests."),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
        ("sglang:token_usage", "The token usage."),
    ]}
    for dp_rank, (running, queued, usage) in enumerate([(3, 1, 0.25), (0, 0, 0.0)]):
        values = {"model_name": "qwen", "engine_type": "unified", "tp_rank": str(dp_rank * 2), "pp_rank": "0", "moe_ep_rank": "0", "dp_rank": str(dp_rank)}
        gauges["sglang:num_running_reqs"].labels(**values).set(running)
        gauges["sglang:num_queue_reqs"].labels(**values).set(queued)
        gauges["sglang:token_usage"].labels(**values).set(usage)
    return {
        "sglang_stored": {"what": "a DP rank stores a chain of two blocks (a uint64 hash, then 9) of tokens 61..68; no DP rank in the batch", "hex": encoder.encode(stored).hex(), "prompt": [61, 62, 63, 64, 65, 66, 67, 68, 69], "reused": 8},
        "sglang_removed": {"what": "block 9 removed", "hex": encoder.encode(removed).hex()},
        "sglang_cleared": {"what": "all blocks cleared", "hex": encoder.encode(cleared).hex()},
        "sglang_metrics": {"what": "two DP ranks: rank 0 runs 3 and queues 1 at 25% token usage, rank 1 idle", "text": prometheus_client.generate_latest(registry).decode()},
    }


def vllm(root):
    """A hybrid model's events (full attention in group 0, a 32-token sliding window in group 1), as vLLM's structs encode them."""
    import hashlib
    import typing

    import msgspec

    ns = {"msgspec": msgspec, "Any": typing.Any, "ExternalBlockHash": typing.Union[bytes, int]}
    path = root / "vllm" / "distributed" / "kv_events.py"
    tree = ast.parse(path.read_text())
    wanted = ["EventBatch", "KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared", "KVEventBatch"]
    body = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted]
    ns["MEDIUM_GPU"] = "GPU"
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)
    encoder = msgspec.msgpack.Encoder()
    bs = 16
    prompt = list(range(1000, 1000 + 8 * bs))  # 8 full blocks; the engine looks up 127 tokens: 7 blocks

    def chain_hashes(tokens):
        out, parent = [], b""
        for i in range(0, len(tokens), bs):
            digest = hashlib.sha256(parent + repr(tokens[i:i + bs]).encode()).digest()
            out.append(int.from_bytes(digest, "big") & ((1 << 64) - 1))
            parent = digest
        return out

    hashes = chain_hashes(prompt)
    # cache_full_blocks, once per KV-cache group: the same block hashes, each group's own event.
    stored = [ns["BlockStored"](block_hashes=hashes, parent_block_hash=None, token_ids=prompt, block_size=bs, lora_id=None, medium="GPU", lora_name=None, extra_keys=None, group_idx=g) for g in (0, 1)]
    batch_stored = ns["KVEventBatch"](ts=1.25, events=stored, data_parallel_rank=0)
    # The sliding-window group's first block (outside the window, freed while the request ran) evicted for a new one.
    batch_removed = ns["KVEventBatch"](ts=2.25, events=[ns["BlockRemoved"](block_hashes=[hashes[0]], medium="GPU", group_idx=1)], data_parallel_rank=0)
    # Namespaces as block_pool.py writes them (extra_keys from generate_block_hash_extra_keys, one entry per block):
    # a cache salt on a prompt's first block, a LoRA adapter's name on every block, an image's hash from the block it starts in.
    salted_tokens = list(range(3000, 3000 + 2 * bs))
    lora_tokens = list(range(3100, 3100 + 2 * bs))
    image_tokens = list(range(3200, 3200 + 3 * bs))
    namespaced = ns["KVEventBatch"](ts=3.25, events=[
        ns["BlockStored"](block_hashes=chain_hashes(salted_tokens), parent_block_hash=None, token_ids=salted_tokens, block_size=bs, lora_id=None, medium="GPU", lora_name=None, extra_keys=[("tenant-a",), None], group_idx=0),
        ns["BlockStored"](block_hashes=chain_hashes(lora_tokens), parent_block_hash=None, token_ids=lora_tokens, block_size=bs, lora_id=3, medium="GPU", lora_name="sql-lora", extra_keys=[("sql-lora",), ("sql-lora",)], group_idx=0),
        ns["BlockStored"](block_hashes=chain_hashes(image_tokens), parent_block_hash=None, token_ids=image_tokens, block_size=bs, lora_id=None, medium="GPU", lora_name=None, extra_keys=[None, ("0f" * 32, 0), ("0f" * 32, -16)], group_idx=0),
    ], data_parallel_rank=0)
    return {
        "vllm_namespaces": {
            "what": "three chains as vLLM's block pool writes their extra_keys: one salted tenant-a (first block), one of LoRA adapter sql-lora (its name on every block), one whose second block starts an image: reused are the salted chain by tenant-a's requests only (16 tokens), the LoRA chain by the adapter's only (16), the image chain's text before the image only (16 of 48)",
            "tokensPerBlock": bs,
            "hex": encoder.encode(namespaced).hex(),
            "salted": {"prompt": salted_tokens + [1], "salt": "tenant-a", "reused": 2 * bs},
            "lora": {"prompt": lora_tokens + [1], "adapter": "sql-lora", "reused": 2 * bs},
            "image": {"prompt": image_tokens + [1], "reused": bs},
        },
        "vllm_hybrid": {
            "what": "a hybrid model (group 0 full attention, group 1 a 32-token sliding window, 16-token blocks): both groups store the 8 blocks of a 128-token prompt, then the sliding-window group's first block is evicted; vLLM's HybridKVCacheCoordinator reuses 112 tokens (the full-attention prefix below the 127 it looks up, the window needing only its last 2 blocks)",
            "tokensPerBlock": bs,
            "groups": [{"kind": "full_attention"}, {"kind": "sliding_window", "sliding_window": 32}],
            "stored_hex": encoder.encode(batch_stored).hex(),
            "removed_hex": encoder.encode(batch_removed).hex(),
            "prompt": prompt,
            "reused": 112,
        }
    }


def trtllm_vswa(serializer):
    """Variable sliding windows: the serializer's events in two windows."""
    bs = 16
    prompt = list(range(2000, 2000 + 16 * bs + 1))
    blocks = lambda base, lo, hi: [block(base + i, prompt[i * bs:(i + 1) * bs]) for i in range(lo, hi)]
    events = serializer.serialize([
        event(0, created(512), window_size=512),
        event(1, created(32768), window_size=32768),
        event(2, stored(None, blocks(7000, 0, 6)), window_size=512),
        event(3, stored(None, blocks(9000, 0, 6)), window_size=32768),
        # The continuation stored in the large window only (the small window's tree keeps the first 6 blocks).
        event(4, stored(9005, blocks(9000, 6, 16)), window_size=32768),
    ])
    return {
        "trtllm_vswa": {
            "what": "VSWA: windows 512 and 32768 (16-token blocks) both store a prompt's first 6 blocks, then window 32768 alone stores the next 10; the engine reuses the minimum over its windows, each looked up from the first block: 96 tokens (the 32768 window alone would say 256)",
            "tokensPerBlock": bs,
            "json": json.dumps(events),
            "prompt": prompt,
            "reused": 96,
        }
    }


def trtllm_v2(root):
    """KV cache manager v2's streaming events, as its wire structs encode them (when the checkout has the file)."""
    import typing

    import msgspec

    path = root / "tensorrt_llm" / "_torch" / "pyexecutor" / "kv_cache_events.py"
    if not path.exists():
        return {}
    ns = {"msgspec": msgspec, "Any": typing.Any, "Optional": typing.Optional, "ExternalBlockHash": int, "EventTokenId": typing.Union[int, str]}
    tree = ast.parse(path.read_text())
    wanted = ["EventBatch", "KVCacheWireEvent", "MultimodalKey", "BlockStored", "BlockRemoved", "AllBlocksCleared", "KVEventBatch"]
    body = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)
    encoder = msgspec.msgpack.Encoder()
    bs = 4
    text = list(range(600, 612))  # 3 blocks of text
    image = list(range(700, 712))  # 3 blocks, the third holding an image's placeholder tokens
    mm = ns["MultimodalKey"](hash=bytes(range(32)).hex(), start_offset=0)
    # drain_events: medium GPU, no lora_name, mm_keys aligned with the blocks (multimodal decoding on).
    stored = ns["BlockStored"](block_hashes=[0x8000000000000011, 0x12, 0x13], parent_block_hash=None, token_ids=text, block_size=bs, lora_id=None, medium="GPU", lora_name=None, mm_keys=[[], [], []])
    with_image = ns["BlockStored"](block_hashes=[0x21, 0x22, 0x23], parent_block_hash=None, token_ids=image, block_size=bs, lora_id=None, medium="GPU", lora_name=None, mm_keys=[[], [], [mm]])
    removed = ns["BlockRemoved"](block_hashes=[0x13, 0x8000000000000011], medium="GPU")
    return {
        "trtllm_v2_stored": {
            "what": "KV cache manager v2 (DP rank 1's stream): a chain of 3 text blocks coalesced in one event (a uint64 hash first), and a chain of 3 whose third block holds an image (its mm_keys): the engine reuses 12 tokens of the first, 8 of the second",
            "tokensPerBlock": bs,
            "hex": encoder.encode(ns["KVEventBatch"](ts=3.5, events=[stored, with_image], data_parallel_rank=1)).hex(),
            "prompts": [text + [1], image + [1]],
            "reused": [12, 8],
        },
        "trtllm_v2_removed": {
            "what": "the text chain's last and first blocks removed in one event (coalesced): nothing of it is reused",
            "hex": encoder.encode(ns["KVEventBatch"](ts=4.5, events=[removed], data_parallel_rank=1)).hex(),
        },
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trtllm", help="a checkout of NVIDIA/TensorRT-LLM (or a folder holding the two files above)")
    parser.add_argument("--sglang", help="a checkout of sgl-project/sglang (or a folder holding the file above)")
    parser.add_argument("--vllm", help="a checkout of vllm-project/vllm (or a folder holding the file above)")
    parser.add_argument("--merge", help="an earlier recording whose other engines' fixtures are kept")
    args = parser.parse_args()
    out = json.loads(Path(args.merge).read_text()) if args.merge else {}
    if args.trtllm:
        out.update(trtllm(Path(args.trtllm)))
    if args.sglang:
        out.update(sglang(Path(args.sglang)))
    if args.vllm:
        out.update(vllm(Path(args.vllm)))
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


def trtllm(root):
    """TensorRT-LLM's serializer's events (partial tails, VSWA) and, where the checkout has it, its fanout's."""
    ns = {}
    serializer = load_class(root / "tensorrt_llm" / "_utils.py", "KVCacheEventSerializer", ns)
    # The fanout imports tensorrt_llm.logger; a stand-in module keeps its warnings for the fixture's record.
    warnings = []
    logger = types.SimpleNamespace(warning=lambda msg, *a: warnings.append(msg % a), debug=lambda *a: None)
    import collections
    import collections.abc
    import typing
    fanout_ns = {"asyncio": asyncio, "deque": collections.deque, "AsyncGenerator": collections.abc.AsyncGenerator, "Any": typing.Any, "logger": logger}
    tpb = 4
    out = {"note": __doc__.strip().splitlines()[0], "tokensPerBlock": tpb}
    out.update(trtllm_vswa(serializer))
    out.update(trtllm_v2(root))

    # 1. A stored event whose last block holds 2 of its 4 tokens: the engine stores the prompt's tail block too.
    out["trtllm_partial_tail"] = {
        "what": "rank 0 stores a chain of two full blocks and a tail block holding 2 of 4 tokens; the engine would reuse the 8 tokens of the full blocks",
        "json": json.dumps(serializer.serialize([
            event(0, created()),
            event(1, stored(None, [block(101, [11, 12, 13, 14]), block(102, [15, 16, 17, 18]), block(103, [19, 20])])),
        ])),
        "prompt": [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
        "reused": 8,
    }
    # 2. A stored event of a single partial block: nothing to keep.
    out["trtllm_partial_only"] = {
        "what": "a stored event whose only block holds 3 of 4 tokens: nothing reusable, nothing kept",
        "json": json.dumps(serializer.serialize([event(2, stored(None, [block(201, [31, 32, 33])]))])),
    }

    fanout_path = root / "tensorrt_llm" / "serve" / "kv_event_fanout.py"
    if not fanout_path.exists():
        return out
    fanout_class = load_class(fanout_path, "KvEventFanout", fanout_ns)
    # 3. The fanout, fed events with an id gap on rank 1: its subscribers get a synthetic all_cleared, its HTTP buffer not.
    engine_events = serializer.serialize([
        event(0, created(), rank=1),
        event(1, stored(None, [block(301, [41, 42, 43, 44])]), rank=1),
        event(2, binding("KVCacheUpdatedData", block_hash=301, cache_level=binding("EventDiff", new_value=1, old_value=0), priority=binding("EventDiff", new_value=35, old_value=35)), rank=1),
        # Events 3 and 4 lost before the fanout saw them.
        event(5, stored(None, [block(302, [51, 52, 53, 54])]), rank=1),
    ])

    async def run():
        # The fanout's own _publish, as its pump calls it for each engine event; a subscriber's queue registered
        # as subscribe() registers it (subscribe() itself would start the pump on the engine).
        fanout = fanout_class(llm=None)
        queue = asyncio.Queue()
        fanout._subscribers[queue] = frozenset()
        for e in engine_events:
            fanout._publish(e)
        received = []
        while not queue.empty():
            received.append(queue.get_nowait()[1])
        return received, fanout.drain_http_buffer()

    received, http = asyncio.run(run())
    out["trtllm_fanout_gap"] = {
        "what": "kv_event_fanout.py fed rank 1's events 0, 1, 2 (created, stored, updated) and then 5: subscribers receive the stored event, a synthetic all_cleared for rank 1, then the stored event after the gap; its HTTP buffer holds the two stored events only (ids 1 and 5)",
        "subscriber_json": json.dumps(received),
        "http_json": json.dumps(http),
        "fanout_warnings": warnings,
    }
    return out


if __name__ == "__main__":
    main()
