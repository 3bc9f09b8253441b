"""Streaming (non-temporal) stores for a kernel's outputs on x86: the output is written past
the caches, without reading its lines in first, and without evicting the inputs.

TIR has no way to ask for a non-temporal store, and TVM's LLVM code generator emits no
`!nontemporal` metadata, so the kernel is compiled as usual and its LLVM IR rewritten: every
vector store into an output buffer that the kernel never loads from gets `!nontemporal`, and
each function that makes such stores ends with an `sfence` (streaming stores are weakly
ordered: the fence makes them visible before the thread pool's barrier tells other threads
the task is done). The IR is then compiled again (`ffi.Module.load_from_file.ll`).

Stores and loads are matched to buffers through the type-based alias metadata that TVM puts
on every access: one TBAA type per buffer, named by the address of the buffer's object, with
children for index ranges. A store that cannot be matched stays a plain store, so a TVM that
named its types otherwise would get plain stores, never wrong ones."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass

# `!12 = !{!"name", !7, i64 0}`: a TBAA type (name, parent); `!13 = !{!12, !12, i64 0}`: an access tag
_TYPE = re.compile(r'^!(\d+) = !\{!"([^"]*)", !(\d+)(?:, i64 \d+)*\}$')
_TAG = re.compile(r"^!(\d+) = !\{!(\d+), !(\d+), i64 \d+\}$")
_ACCESS = re.compile(r"^\s*(?:%[\w.]+ = )?(load|store) (?:volatile )?(<\d+ x \w+>|\w+)[ ,].*!tbaa !(\d+)")
_ALIGN = re.compile(r", align (\d+)")
_DEFINE = re.compile(r"^define\b")
_RET = re.compile(r"^\s*ret\b")
_SFENCE = "llvm.x86.sse.sfence"
_MIN_VECTOR_BYTES = 16  # narrower stores would leave write-combining buffers half filled
_ALIGNED = 64  # a wider vector's store is split into (aligned) stores of at most this many bytes


@dataclass(frozen=True)
class Rewrite:
    text: str  # the rewritten IR
    stores: int  # vector stores made non-temporal
    buffers: tuple[str, ...]  # the buffers they write


def _bytes(llvm_type: str) -> int:
    m = re.fullmatch(r"<(\d+) x (\w+)>", llvm_type)
    if not m:
        return 0
    lanes, elem = int(m.group(1)), m.group(2)
    bits = {"float": 32, "double": 64, "half": 16, "bfloat": 16}.get(elem)
    if bits is None and elem.startswith("i"):
        bits = int(elem[1:])
    return lanes * (bits or 0) // 8


def buffer_of_tags(lines: list[str], names: dict[str, str]) -> dict[str, str]:
    """Access tag id -> buffer, for the tags whose type is (or descends from) the TBAA type
    named by a buffer's address; `names` maps those addresses to buffer names."""
    parent, type_name, tag_type = {}, {}, {}
    for line in lines:
        if m := _TYPE.match(line):
            type_name[m.group(1)], parent[m.group(1)] = m.group(2), m.group(3)
        elif m := _TAG.match(line):
            tag_type[m.group(1)] = m.group(3)
    out = {}
    for tag, node in tag_type.items():
        seen = set()
        while node in type_name and node not in seen:
            seen.add(node)
            if type_name[node] in names:
                out[tag] = names[type_name[node]]
                break
            node = parent.get(node)
    return out


def stream_outputs(ir: str, names: dict[str, str]) -> Rewrite:
    """`ir` with its aligned vector stores into the buffers of `names` (TBAA type name, the
    buffer object's address -> buffer name) that the IR never loads from made non-temporal,
    and an sfence before every return of a function that makes them."""
    lines = ir.split("\n")
    owner = buffer_of_tags(lines, names)
    loaded, stored = set(), set()
    for line in lines:
        if (m := _ACCESS.match(line)) and m.group(3) in owner:
            (loaded if m.group(1) == "load" else stored).add(owner[m.group(3)])
    streamed = stored - loaded
    md = 1 + max((int(m.group(1)) for line in lines if (m := re.match(r"^!(\d+) = ", line))), default=0)
    out, count, function = [], 0, None  # function: the lines of the one being read
    for line in lines:
        if _DEFINE.match(line):
            function, fenced = [], False
        if function is None:
            out.append(line)
            continue
        m = _ACCESS.match(line)
        if m and m.group(1) == "store" and owner.get(m.group(3)) in streamed and _streamable(m.group(2), line):
            line = line.replace(f"!tbaa !{m.group(3)}", f"!tbaa !{m.group(3)}, !nontemporal !{md}", 1)
            count += 1
            fenced = True
        function.append(line)
        if line.startswith("}"):
            out += [f"  call void @{_SFENCE}()\n{b}" if fenced and _RET.match(b) else b for b in function]
            function = None
    if not count:
        return Rewrite(ir, 0, ())
    text = "\n".join(out)
    if f"declare void @{_SFENCE}()" not in text:
        text += f"\ndeclare void @{_SFENCE}()\n"
    return Rewrite(text + f"\n!{md} = !{{i32 1}}\n", count, tuple(sorted(streamed)))


def _streamable(llvm_type: str, line: str) -> bool:
    """A vector of _MIN_VECTOR_BYTES or more, aligned to its size (or to _ALIGNED bytes for
    a wider one: it is stored as several vectors of that size)."""
    size = _bytes(llvm_type)
    align = _ALIGN.search(line)
    return size >= _MIN_VECTOR_BYTES and align is not None and int(align.group(1)) >= min(size, _ALIGNED)


def recompile(ir: str):
    """A runtime module compiled from LLVM IR text."""
    import tvm

    load = tvm.get_global_func("ffi.Module.load_from_file.ll")
    fd, path = tempfile.mkstemp(suffix=".ll", prefix="akg-stream-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(ir)
        return load(path, "ll")
    finally:
        os.remove(path)
