"""The core, byte for byte: Python's ``canonicalize`` and ``fingerprint`` against the
``idemkit`` CLI (``target/debug/idemkit``) on a seeded generated corpus of 2,000+
accepted documents and 400+ rejected ones (the same error, offset and pointer), and
on the corpora the Rust tests read (``core/tests/data/jcs``: the official RFC 8785
vectors, the 72 edge cases, the number corpus).
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

import idemkit_rs
from conftest import REPO

SEED = 20261203
ACCEPTED = 2_000
REJECTED = 400
JCS = REPO / "core" / "tests" / "data" / "jcs"

# --- the generator --------------------------------------------------------------

ASTRAL = ["\U0001F600", "\U00010437", "\U0001D11E", "\U000E0041"]
BMP = ["é", "ß", "€", "中", "\u2028", "\ufeff", "\ue000", "\uffff", "ö", "Ω"]


def escape_char(c: str, rng: random.Random) -> str:
    """One character of a JSON string, spelled one of the ways JSON allows."""
    code = ord(c)
    if c == '"':
        return '\\"'
    if c == "\\":
        return "\\\\"
    if code < 0x20:
        short = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}
        if code in short and rng.random() < 0.5:
            return short[code]
        return "\\u%04x" % code
    if c == "/" and rng.random() < 0.5:
        return "\\/"
    if code > 0xFFFF:
        if rng.random() < 0.4:
            v = code - 0x10000
            hi, lo = 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)
            spell = "\\u%04x\\u%04x" if rng.random() < 0.5 else "\\u%04X\\u%04X"
            return spell % (hi, lo)
        return c
    if rng.random() < 0.15:
        return ("\\u%04x" if rng.random() < 0.5 else "\\u%04X") % code
    return c


def random_text(rng: random.Random, length: int) -> str:
    out = []
    for _ in range(length):
        r = rng.random()
        if r < 0.55:
            out.append(rng.choice("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 _-"))
        elif r < 0.65:
            out.append(rng.choice('"\\/'))
        elif r < 0.72:
            out.append(chr(rng.randrange(0, 0x20)))
        elif r < 0.85:
            out.append(rng.choice(BMP))
        else:
            out.append(rng.choice(ASTRAL))
    return "".join(out)


def json_string(s: str, rng: random.Random) -> str:
    return '"' + "".join(escape_char(c, rng) for c in s) + '"'


def respell(number: float, rng: random.Random) -> str:
    """A literal whose exact decimal value is `number`'s shortest form."""
    text = repr(number)
    if text in ("inf", "-inf", "nan"):
        return "0"
    if "e" in text or "E" in text:
        mantissa, exponent = text.split("e")
        exp = int(exponent)
    else:
        mantissa, exp = text, 0
    if mantissa.endswith(".0"):
        mantissa = mantissa[:-2]
    r = rng.random()
    if r < 0.3:
        literal = mantissa + ("e%d" % exp if exp else "")
    elif r < 0.5:
        literal = mantissa + ("E+%d" % exp if exp >= 0 else "E%d" % exp)
    elif r < 0.7 and "." not in mantissa:
        literal = mantissa + ".000" + ("e%d" % exp if exp else "")
    elif r < 0.85:
        # Shift the point: 15 = 1.5e1 = 150e-1.
        sign = "-" if mantissa.startswith("-") else ""
        digits = mantissa.lstrip("-")
        if "." in digits:
            whole, frac = digits.split(".")
        else:
            whole, frac = digits, ""
        all_digits = (whole + frac).lstrip("0") or "0"
        point = len(whole.lstrip("0")) if whole.strip("0") else -(len(frac) - len(frac.lstrip("0")))
        exp10 = exp + point - len(all_digits)
        literal = sign + all_digits + ("0" * 2) + "e" + str(exp10 - 2)
    else:
        literal = repr(number)
    return literal


def random_number(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        return str(rng.randrange(-(2**53) + 1, 2**53))
    if r < 0.4:
        return rng.choice(["0", "-0", "1", "-1", "0.5", "1e0", "10e-1", "1.0", "-0.0", "1E2", "100e-2"])
    if r < 0.8:
        return respell(rng.uniform(-1e6, 1e6), rng)
    bits = rng.getrandbits(64)
    value = struct.unpack("<d", struct.pack("<Q", bits))[0]
    if value != value or value in (float("inf"), float("-inf")):
        value = 1.5
    return respell(value, rng)


def ws(rng: random.Random) -> str:
    return "".join(rng.choice(" \t\r\n") for _ in range(rng.choice([0, 0, 0, 1, 2])))


def random_value(rng: random.Random, depth: int) -> str:
    r = rng.random()
    if depth > 6 or r < 0.35:
        leaf = rng.random()
        if leaf < 0.35:
            return json_string(random_text(rng, rng.randrange(0, 12)), rng)
        if leaf < 0.75:
            return random_number(rng)
        return rng.choice(["true", "false", "null"])
    if r < 0.65:
        items = [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
        return "[" + ws(rng) + ("," + ws(rng)).join(items) + ws(rng) + "]"
    names = set()
    members = []
    for _ in range(rng.randrange(0, 6)):
        name = random_text(rng, rng.randrange(0, 6))
        if name in names:
            continue
        names.add(name)
        members.append(ws(rng) + json_string(name, rng) + ws(rng) + ":" + ws(rng) + random_value(rng, depth + 1))
    return "{" + ",".join(members) + ws(rng) + "}"


def nest(doc: str, depth: int) -> str:
    for d in range(depth):
        doc = "[%d,%s]" % (d, doc) if d % 2 == 0 else '{"k\\ud801\\udc37%d":%s,"\ue000":null}' % (d, doc)
    return doc


REJECTIONS = [
    lambda rng: '{"a":1,"a":2}',
    lambda rng: '{"%s":1,"\\u00%x":2}' % ("abcdef"[rng.randrange(6)], 0x61 + rng.randrange(6)),
    lambda rng: '["\\ud800"]',
    lambda rng: '"\\udc00\\ud800"',
    lambda rng: '{"x":"\\ud83d x"}',
    lambda rng: "[9007199254740993]",
    lambda rng: "[%s]" % rng.choice(["1e-400", "0.10000000000000001", "123456789012345678901234567890", "2.00000000000000000001"]),
    lambda rng: "[1e400]",
    lambda rng: rng.choice(["NaN", "[Infinity]", "[-Infinity]", "+1", ".5", "[01]", "[1.]", "[1e]", "[-]", "[0x10]"]),
    lambda rng: "\ufeff{}",
    lambda rng: "[" * 129 + "]" * 129,
    lambda rng: '{"a":1} x',
    lambda rng: "[1,2,]",
    lambda rng: '{"a" 1}',
    lambda rng: '{"a":1,}',
    lambda rng: "{1:2}",
    lambda rng: '"\\x41"',
    lambda rng: '"\\u12G4"',
    lambda rng: '["tab\there"]',
    lambda rng: "",
    lambda rng: "   ",
    lambda rng: "{'a':1}",
]


def generate() -> Tuple[List[bytes], List[bytes]]:
    """Accepted and rejected documents (as bytes), decided by Python, checked by the CLI."""
    rng = random.Random(SEED)
    accepted: List[bytes] = []
    rejected: List[bytes] = []
    i = 0
    while len(accepted) < ACCEPTED or len(rejected) < REJECTED:
        i += 1
        r = rng.random()
        if r < 0.7:
            doc = ws(rng) + random_value(rng, 0) + ws(rng)
            if i % 40 == 0:
                doc = nest(doc, 60 + i % 60)
            raw = doc.encode("utf-8", "surrogatepass")
        elif r < 0.8:
            raw = rng.choice(REJECTIONS)(rng).encode("utf-8")
        elif r < 0.88:
            # A valid document cut short, or with one byte replaced.
            valid = random_value(rng, 0).encode("utf-8")
            cut = rng.randrange(0, len(valid) + 1)
            raw = valid[:cut] if rng.random() < 0.5 else valid[:cut] + bytes([rng.randrange(256)]) + valid[cut + 1 :]
        elif r < 0.94:
            # Invalid UTF-8 inside a string: a lone byte, an overlong form, an encoded surrogate.
            bad = rng.choice([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\x80"])
            raw = b'{"k":"a' + bad + b'z"}'
        else:
            raw = ('{"ctl":"%s"}' % chr(rng.randrange(0, 0x20))).encode("utf-8")
        try:
            idemkit_rs.canonicalize(raw)
        except idemkit_rs.JsonError:
            if len(rejected) < REJECTED * 2:
                rejected.append(raw)
            continue
        if len(accepted) < ACCEPTED * 2:
            accepted.append(raw)
    return accepted, rejected


# --- the CLI --------------------------------------------------------------------


def cli_error_line(message: str) -> str:
    """A message as the CLI prints it: `idemkit: ` and control characters escaped
    as Rust's `char::escape_default` writes them."""
    out = ["idemkit: "]
    for c in message:
        code = ord(c)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            out.append({9: "\\t", 10: "\\n", 13: "\\r"}.get(code, "\\u{%x}" % code))
        else:
            out.append(c)
    return "".join(out)


def run_cli(binary: Path, args: List[str], stdin: bytes) -> Tuple[int, bytes, str]:
    done = subprocess.run([str(binary), *args, "-"], input=stdin, capture_output=True, timeout=60)
    return done.returncode, done.stdout, done.stderr.decode("utf-8")


def python_canonical(doc: bytes) -> Tuple[int, bytes, str]:
    """What the CLI would print for `doc`, from Python: (exit, stdout, stderr)."""
    try:
        return 0, idemkit_rs.canonicalize(doc), ""
    except idemkit_rs.JsonError as e:
        return 65, b"", cli_error_line(f"rejected JSON: {e} [{e.code}]") + "\n"


def fingerprint_case(rng: random.Random, doc: bytes) -> Tuple[List[str], dict]:
    """Random CLI flags for `idemkit fingerprint` and the same as keyword arguments."""
    args: List[str] = []
    kwargs: dict = {}
    operation = rng.choice(["", "appointments.create", "payments.capture", "ü.op"])
    args += ["--operation", operation]
    if rng.random() < 0.3:
        version = rng.randrange(1, 5)
        args += ["--schema-version", str(version)]
        kwargs["schema_version"] = version
    if rng.random() < 0.5:
        method = rng.choice(["POST", "PUT", "PATCH", "post"])
        path = rng.choice(["/accounts/A/withdraw", "/appointments", "/x/%C3%A9/y", "/"])
        args += ["--method", method, "--path", path]
        kwargs.update(method=method, path=path)
        if rng.random() < 0.6:
            query = rng.choice(["b=2&a=1", "a=1&a=0", "utm_source=mail&x=%20", "?q=1", ""])
            args += ["--query", query]
            kwargs["query"] = query
            if rng.random() < 0.3:
                args += ["--ignore-query-param", "utm_source"]
                kwargs["ignore_query_params"] = ["utm_source"]
            elif rng.random() < 0.2:
                args += ["--ignore-query"]
                kwargs["ignore_query"] = True
    if rng.random() < 0.2:
        pointer = rng.choice(["/a", "/0", "/k~1x", "/request_id"])
        flag = rng.choice(["include", "exclude"])
        args += ["--" + flag, pointer]
        kwargs[flag] = [pointer]
    return ["fingerprint", *args], dict(kwargs, operation=operation)


def python_fingerprint(doc: bytes, kwargs: dict) -> Tuple[int, bytes, str]:
    try:
        return 0, (idemkit_rs.fingerprint(doc, **kwargs) + "\n").encode(), ""
    except idemkit_rs.JsonError as e:
        return 65, b"", cli_error_line(f"rejected body: {e} [{e.code}]") + "\n"


def compare(binary: Path, cases: List[Tuple[List[str], bytes, Tuple[int, bytes, str]]]) -> List[str]:
    """Runs every case through the CLI (two at a time); returns what differed."""

    def one(case):
        args, doc, expected = case
        got = run_cli(binary, args, doc)
        if got != expected:
            return f"{args} {doc[:120]!r}: CLI {got!r} != Python {expected!r}"
        return None

    with ThreadPoolExecutor(max_workers=2) as pool:
        return [d for d in pool.map(one, cases) if d is not None]


# --- the tests ------------------------------------------------------------------


def test_canonical_bytes_and_rejections_equal_the_cli_on_a_generated_corpus(idemkit_bin):
    """2,000+ accepted documents (escapes, astral and private-use characters, number
    respellings, whitespace, nesting up to the 128 limit) and 400+ rejected ones
    (duplicates, surrogates, invalid UTF-8, inexact numbers, BOM, depth, truncations,
    control characters): Python's bytes, or its error message, code, offset and
    pointer, are the CLI's."""
    accepted, rejected = generate()
    assert len(accepted) >= ACCEPTED and len(rejected) >= REJECTED
    codes = set()
    for doc in rejected:
        try:
            idemkit_rs.canonicalize(doc)
        except idemkit_rs.JsonError as e:
            codes.add(e.code)
            assert isinstance(e.offset, int) and isinstance(e.pointer, str)
            assert f"at byte {e.offset} " in str(e)
    # The rejections really cover the strict profile's refusals.
    for code in [
        "json-duplicate-member-name",
        "json-lone-high-surrogate",
        "json-lone-low-surrogate",
        "json-invalid-utf8",
        "json-number-not-exact",
        "json-number-overflow",
        "json-leading-bom",
        "json-too-deep",
        "json-trailing-data",
        "json-control-character",
        "json-unexpected-end",
        "json-invalid-token",
        "json-invalid-escape",
    ]:
        assert code in codes, f"no rejection with {code} in the corpus"
    cases = [(["canonicalize"], doc, python_canonical(doc)) for doc in accepted + rejected]
    differences = compare(idemkit_bin, cases)
    assert not differences, f"{len(differences)} differences, first: {differences[:3]}"


def test_fingerprints_equal_the_cli_with_request_lines_and_selections(idemkit_bin):
    """The same corpus fingerprinted with random operations, schema versions, request
    lines (method, path, query, ignored parameters) and field selections: the same
    64 hex characters as `idemkit fingerprint`, or the same rejection."""
    accepted, rejected = generate()
    rng = random.Random(SEED + 1)
    cases = []
    for doc in accepted[:2_000] + rejected[:400]:
        args, kwargs = fingerprint_case(rng, doc)
        cases.append((args, doc, python_fingerprint(doc, kwargs)))
    differences = compare(idemkit_bin, cases)
    assert not differences, f"{len(differences)} differences, first: {differences[:3]}"


def test_form_and_raw_bodies_fingerprint_as_the_cli(idemkit_bin):
    """Form bodies (pairs sorted by name, repeated names in order) and raw bodies."""
    cases = []
    for body, content_type in [
        (b"b=2&a=1&a=0", "application/x-www-form-urlencoded"),
        (b"name=%C3%A9t%C3%A9&x=+", "application/x-www-form-urlencoded; charset=utf-8"),
        (b"\x00\xffraw", "application/octet-stream"),
        (b"plain text", "text/plain"),
    ]:
        expected = (0, (idemkit_rs.fingerprint(body, "op", content_type=content_type) + "\n").encode(), "")
        cases.append((["fingerprint", "--operation", "op", "--content-type", content_type], body, expected))
    bad = b"a=%zz"
    with pytest.raises(idemkit_rs.FormError) as refused:
        idemkit_rs.fingerprint(bad, "op", content_type="application/x-www-form-urlencoded")
    assert refused.value.code == "form-invalid-percent-escape" and refused.value.offset == 2
    line = cli_error_line(f"rejected body: {refused.value} [{refused.value.code}]") + "\n"
    cases.append((["fingerprint", "--operation", "op", "--content-type", "application/x-www-form-urlencoded"], bad, (65, b"", line)))
    assert compare(idemkit_bin, cases) == []


def test_official_vectors_and_edge_cases_of_the_rust_tests():
    """The RFC 8785 official vectors (plain profile; strict refuses values.json's
    inexact number) and the 72 edge cases, with the outcome each case records."""
    for source in sorted((JCS / "input").glob("*.json")):
        expected = (JCS / "output" / source.name).read_bytes()
        assert idemkit_rs.canonicalize(source.read_bytes(), profile="rfc8785") == expected, source.name
        if source.name != "values.json":
            assert idemkit_rs.canonicalize(source.read_bytes()) == expected, source.name
    with pytest.raises(idemkit_rs.JsonError) as values:
        idemkit_rs.canonicalize((JCS / "input" / "values.json").read_bytes())
    assert values.value.code == "json-number-not-exact"

    cases = json.loads((JCS / "edge_cases.json").read_text())["cases"]
    assert len(cases) == 72
    for case in cases:
        raw = bytes.fromhex(case["input_hex"])
        strict = case["strict"]
        if strict["result"] == "ok":
            assert idemkit_rs.canonicalize(raw).hex() == strict["output_hex"], case["id"]
        else:
            with pytest.raises(idemkit_rs.JsonError):
                idemkit_rs.canonicalize(raw)


def test_number_corpus_serializes_as_rfc8785():
    """Appendix B and the first 10,000 lines of the ES6 number corpus: the double of
    each hex pattern, written by Python and canonicalized, is the expected string."""
    rows = []
    for line in (JCS / "numbers" / "rfc8785_appendix_b.csv").read_text().splitlines():
        rows.append(line.split(","))
    for line in (JCS / "numbers" / "es6testfile100m_first10000.txt").read_text().splitlines():
        rows.append(line.split(","))
    assert len(rows) > 10_000
    for bits, expected in rows:
        value = struct.unpack(">d", bytes.fromhex(bits.zfill(16)))[0]
        assert idemkit_rs.canonicalize(repr(value).encode()) == expected.encode(), bits
        assert idemkit_rs.canonicalize(expected) == expected.encode(), bits


def test_errors_carry_offset_pointer_and_code_as_attributes():
    """A rejection is a JsonError (a ValueError) whose attributes say where."""
    with pytest.raises(idemkit_rs.JsonError) as refused:
        idemkit_rs.canonicalize('{"x":[0,{"a":1,"a":2}]}')
    e = refused.value
    assert isinstance(e, ValueError) and isinstance(e, idemkit_rs.IdemkitError)
    assert (e.code, e.offset, e.pointer) == ("json-duplicate-member-name", 15, "/x/1/a")
    assert str(e) == 'duplicate member name "a" at byte 15 (pointer /x/1/a)'
    with pytest.raises(idemkit_rs.SpecError) as bad_pointer:
        idemkit_rs.fingerprint(b"{}", "op", include=["a"])
    assert bad_pointer.value.code.startswith("pointer-")


def test_keys_are_checked_as_the_cli_checks_them(idemkit_bin):
    """`check_key`, `parse_key_header` and `derive_key` agree with the CLI and core."""
    for value in ['"8e03978e-40d5-43e8-bc93-6894a57f9324"', "abc", '"a,b"', "a,b", "", '"x', "é", "a b", "x" * 256]:
        done = subprocess.run([str(idemkit_bin), "key", "check", value], capture_output=True)
        try:
            key = idemkit_rs.parse_key_header(value)
        except idemkit_rs.KeyFormatError as e:
            assert done.returncode != 0, value
            assert e.code in done.stderr.decode(), (value, e.code, done.stderr)
        else:
            assert done.returncode == 0, (value, done.stderr)
            assert key in done.stdout.decode(), (value, done.stdout)
    assert idemkit_rs.key_header_value("a,b") == '"a,b"'
    assert idemkit_rs.derive_key("travel-agent", "run-7", "book").startswith("ik1-")
    assert idemkit_rs.derive_key("n", "r", "s") == idemkit_rs.derive_key("n", "r", "s")
    assert idemkit_rs.derive_key("n", "r", "s") != idemkit_rs.derive_key("n", "r", "t")


def test_the_type_stubs_and_docstrings_cover_every_public_name():
    """`_native.pyi` declares exactly what the extension exports, and every public
    name of the package has a docstring."""
    import ast
    import inspect

    import idemkit_rs._native as native
    from idemkit_rs import asgi, client, tools

    stub = ast.parse((Path(native.__file__).parent / "_native.pyi").read_text())
    declared = {node.name for node in stub.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    # Constants, declared with their type (`NAME: int`).
    declared |= {node.target.id for node in stub.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    exported = {name for name in dir(native) if not name.startswith("_")}
    assert declared == exported
    for module in (idemkit_rs, client, tools, asgi):
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if inspect.isfunction(value) or inspect.isclass(value) or inspect.isbuiltin(value):
                assert (value.__doc__ or "").strip(), f"{module.__name__}.{name} has no docstring"
