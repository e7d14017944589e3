"""The tensors of a safetensors file (8-byte little-endian header length, JSON header, raw data),
read without any library: for the tests' checks of `loom ckpt export` files."""
import json
import struct


def safetensors_entries(path):
    """(name, header entry, raw bytes) of each tensor in `path`; the metadata left out."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        yield key, entry, data[8 + n + begin:8 + n + end]
