#!/usr/bin/env python3
"""Writes the seed corpus of npy_fuzz (tests/fuzz_npy/corpus/): valid files as nn::save and
NumPy write them, for the parameter lists npy_fuzz.cpp loads into. Run from this folder."""
import struct


def record(dict_text, data, version=1):
    prefix = 10 if version == 1 else 12
    pad = (-(prefix + len(dict_text) + 1)) % 64
    header = (dict_text + " " * pad + "\n").encode()
    length = struct.pack("<H" if version == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header + data


def array(descr, shape, values, version=1):
    dims = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    fmt = {"<f4": "<f", "<f8": "<d"}[descr]
    data = b"".join(struct.pack(fmt, v) for v in values)
    return record("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims), data, version)


def names(*ns, version=1):
    joined = "\n".join(ns).encode()
    return record("{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }" % len(joined), joined, version)


seeds = {
    # float: w [2, 3], b [2]
    "float_wb.npy": names("w", "b") + array("<f4", (2, 3), range(6)) + array("<f4", (2,), [0.5, -1.0]),
    # float: a scalar s [] and an empty e [0]
    "float_scalar_empty.npy": names("s", "e") + array("<f4", (), [3.0]) + array("<f4", (0,), []),
    # double: weight [3, 2], bias [3], in format 2.0
    "double_v2.npy": names("weight", "bias", version=2) + array("<f8", (3, 2), range(6), 2) + array("<f8", (3,), [1, 2, 3], 2),
    # format 3.0, double quotes, other whitespace, no trailing comma
    "float_v3_quotes.npy": names("w", "b", version=3)
    + record('{"shape":(2,3),"descr":"<f4","fortran_order":False}', struct.pack("<6f", *range(6)), 3)
    + record("{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , ) }", struct.pack("<2f", 1, 2), 3),
    # one record of three dimensions (the reader alone)
    "one_record_3d.npy": array("<f8", (2, 1, 2), [1, 2, 3, 4]),
}
for name, data in seeds.items():
    with open("corpus/" + name, "wb") as f:
        f.write(data)
