"""Reading a learner's prediction and grading it against the library's answer.

One definition, two languages: ``read_prediction``, ``compare`` and ``reveal`` here are what the live widget
prints; the page's JavaScript (``widgets/static/runtime.js``: ``read``, ``compare``, ``reveal``) is a line-by-line
transcription, and ``tests/test_widget_js.py`` runs both over the same table of cases in Chromium and in Node and
asserts the same text. The tables both use (units, digit scripts) are written here once and emitted into the page.

How a prediction is read (deterministic; the feedback always starts with what was read, "Read as 1.5 GB."):

* Unicode compatibility forms are folded (NFKC: full-width digits, thin and no-break spaces); the digits of
  the scripts in ``DIGIT_ZEROS`` (Arabic-Indic, Devanagari, Thai, ...) read as 0-9; runs of spaces count as one.
* A sign: ``+``, ``-`` or the minus sign ``−`` (the one the feedback prints).
* Separators: ``_``, ``'`` and spaces separate thousands (groups of exactly three digits). With both ``.`` and
  ``,`` the later one is the decimal mark ("1,234.5", "1.234,5"). A single ``,`` between 1-3 digits (not
  starting with 0) and exactly three digits, with no other separator, is a thousands separator ("1,500" is
  1500, and the echo says so); any other single ``,`` is a decimal comma ("1,5" is 1.5, "0,125", "1 234,5").
  A single ``.`` is always a decimal point ("1.500" is 1.5); several ``.`` or several ``,`` separate thousands.
* An exponent: ``1e3``, ``2.5E-4``.
* A unit after the number: none (the exercise's unit), the exercise's own unit or its singular ("GPU" for
  "GPUs"), or a unit of the same quantity, converted (``UNITS``: B ... PB, KiB ... TiB; ns ... h; %, x, ×):
  "52 GiB" in a GB exercise reads as 55.83 GB and says so; "37.5 %" where the answer is a fraction is 0.375.
* Refused, with one message and without giving the answer away: text, hexadecimal ("0x37"), "inf", "nan",
  a number too large for a double (1e309) or one that underflows to 0, digit groups that are not thousands
  ("1,23,456"), units that are unknown or of another quantity, more than ``MAX_CHARS`` characters.

Grading (``compare``): the relative error |x − v| / |v| against the tolerance (5 % by default), then 25 %,
then the right order of magnitude (x / v between 0.1 and 10), else off. Amounts are rounded half away from
zero on the exact binary value (``fmt_fixed``, ``fmt_sig``), which is what JavaScript's ``toFixed`` and
``toExponential`` do, so both languages print the same digits; a prediction more than 10 times off is shown
as a ratio ("1.8e306 × the answer"), never as a 300-digit difference.

    >>> read_prediction("1,5", "GB").echo
    '1.5 GB'
    >>> read_prediction("52 GiB", "GB").echo
    '52 GiB = 55.83 GB'
    >>> r = Result(55.56, "55.6 GB")
    >>> print(compare("58", r, "GB"))
    Read as 58 GB. The library says 55.6 GB. Your prediction is off by +2.4 GB (+4 %): ✓ within 5 %.
    >>> print(compare("1e308", r, "GB"))  # doctest: +NORMALIZE_WHITESPACE
    Read as 1e308 GB. The library says 55.6 GB. Your prediction is 1.8e306 × the answer: ✗ off by more than a
    factor of 10.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal

MINUS = "\u2212"
MAX_CHARS = 60
BIG = 1e15  # amounts from here on are printed with an exponent (below, every digit of a double is exact)

# unit as typed (lower case) -> (quantity, factor to the quantity's base unit, how the echo writes it)
UNITS: dict[str, tuple[str, float, str]] = {
    "b": ("size", 1.0, "B"),
    "byte": ("size", 1.0, "B"),
    "bytes": ("size", 1.0, "B"),
    "kb": ("size", 1e3, "kB"),
    "kib": ("size", 1024.0, "KiB"),
    "mb": ("size", 1e6, "MB"),
    "mib": ("size", 1048576.0, "MiB"),
    "gb": ("size", 1e9, "GB"),
    "gib": ("size", 1073741824.0, "GiB"),
    "tb": ("size", 1e12, "TB"),
    "tib": ("size", 1099511627776.0, "TiB"),
    "pb": ("size", 1e15, "PB"),
    "ns": ("time", 1e-9, "ns"),
    "μs": ("time", 1e-6, "μs"),
    "us": ("time", 1e-6, "μs"),
    "ms": ("time", 1e-3, "ms"),
    "s": ("time", 1.0, "s"),
    "sec": ("time", 1.0, "s"),
    "min": ("time", 60.0, "min"),
    "h": ("time", 3600.0, "h"),
    "%": ("ratio", 0.01, "%"),
    "x": ("ratio", 1.0, "×"),
    "×": ("ratio", 1.0, "×"),
    "": ("ratio", 1.0, ""),
}
# the zero of each script whose digits read as 0-9 (ten consecutive code points; NFKC already folds full-width)
DIGIT_ZEROS = (
    0x0660,
    0x06F0,
    0x0966,
    0x09E6,
    0x0A66,
    0x0AE6,
    0x0B66,
    0x0BE6,
    0x0C66,
    0x0CE6,
    0x0D66,
    0x0E50,
    0x0ED0,
    0x0F20,
    0x1040,
    0x17E0,
    0x1810,
)

_NUMBER = re.compile("^([+\\-\u2212]?) ?([0-9]+(?:[ _'.,][0-9]+)*|[.,][0-9]+)(?:[eE]([+\\-\u2212]?[0-9]+))? ?(.*)$")
_HEX = re.compile("^[+\\-\u2212]?0[xX][0-9a-fA-F]+$")
_NOT_FINITE = ("inf", "infinity", "∞", "nan")


@dataclass(frozen=True)
class Result:
    """The library's answer for one combination of controls: a number (or a word), its text, or an error."""

    value: float | str | None
    text: str
    explanation: str = ""
    error: str | None = None


@dataclass(frozen=True)
class Reading:
    """What a prediction was read as: ``value`` in the exercise's unit and ``echo`` ("1,500 GB"), with a
    ``note`` where the reading was a choice; or ``error``, the whole refusal message."""

    value: float | None
    echo: str = ""
    note: str = ""
    error: str | None = None

    @property
    def sentence(self) -> str:
        """'Read as 1,500 GB (the comma read as a thousands separator).'"""
        return f"Read as {self.echo}" + (f" ({self.note})" if self.note else "") + "."


# ---------------------------------------------------------------------------------------------- numbers as text


def _group(digits: str) -> str:
    """'1234567' -> '1,234,567'."""
    head = len(digits) % 3 or 3
    return ",".join([digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)])


def _trim(frac: str) -> str:
    """'.50' -> '.5', '.00' -> ''."""
    frac = frac.rstrip("0")
    return "" if frac == "." else frac


def _round_sig(x: float, sig: int) -> tuple[str, int]:
    """The ``sig`` leading digits of |x| rounded half away from zero (as JavaScript's ``toExponential``), and
    the decimal exponent of the first: 55.834574848, 4 -> ('5583', 1)."""
    d = Context(prec=sig, rounding=ROUND_HALF_UP).plus(Decimal(abs(x)))
    return "".join(map(str, d.as_tuple().digits)).ljust(sig, "0")[:sig], d.adjusted()


def fmt_sig(x: float, sig: int = 4) -> str:
    """``x`` to ``sig`` significant digits, trailing zeros dropped, thousands grouped, the minus sign ``−``,
    an exponent from 1e15 on and below 1e-6: 55.834574848 -> '55.83', 1.8e306 -> '1.8e306'."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits, e = _round_sig(x, sig)
    if e >= 15 or e < -6:
        text = digits[0] + _trim("." + digits[1:]) + "e" + (MINUS if e < 0 else "") + str(abs(e))
    elif e >= 0:
        text = _group(digits[: e + 1].ljust(e + 1, "0")) + _trim("." + digits[e + 1 :])
    else:
        text = "0" + _trim("." + "0" * (-e - 1) + digits)
    return (MINUS if x < 0 else "") + text


def fmt_fixed(x: float, digits: int) -> str:
    """``x`` with ``digits`` decimals, rounded half away from zero on its exact binary value (JavaScript's
    ``toFixed``), thousands grouped, the minus sign ``−``: 2.25, 1 -> '2.3' (Python's format gives '2.2').
    From ``BIG`` (1e15) on, three significant digits with an exponent (``fmt_sig``)."""
    if not abs(x) < BIG:
        return fmt_sig(x, 3)
    q = Decimal(abs(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP, context=Context(prec=60))
    whole, _, frac = format(q, "f").partition(".")
    text = _group(whole) + ("." + frac if frac else "")
    return (MINUS if x < 0 and q != 0 else "") + text


# ---------------------------------------------------------------------------------------------- reading


def squash(text: str) -> str:
    """NFKC, then every run of ASCII whitespace as one space, trimmed (what both languages compare)."""
    return re.sub("[ \t\n\r\f\v]+", " ", unicodedata.normalize("NFKC", text or "")).strip(" ")


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _ascii_digits(text: str) -> str:
    out = []
    for ch in text:
        c = ord(ch)
        zero = next((z for z in DIGIT_ZEROS if z <= c <= z + 9), None)
        out.append(str(c - zero) if zero is not None else ch)
    return "".join(out)


def _refuse(shown: str, reason: str) -> Reading:
    return Reading(None, error=f"Could not read “{_clip(shown)}”: {reason}.")


def _numeral(num: str) -> tuple[str, str, str] | None:
    """The digits before and after the decimal mark, and a note, or None if the separators do not read."""
    dots, commas, note = num.count("."), num.count(","), ""
    if dots and commas:
        dec = "." if num.rfind(".") > num.rfind(",") else ","
        if num.count(dec) > 1:
            return None
        thou = "," if dec == "." else "."
    elif commas == 1 and re.fullmatch("[1-9][0-9]{0,2},[0-9]{3}", num):
        dec, thou, note = "", ",", "the comma read as a thousands separator"
    elif commas == 1 or dots == 1:
        dec, thou = ("," if commas else "."), ""
    else:
        dec, thou = "", ("," if commas else "." if dots else "")
    whole, frac = num.split(dec) if dec else (num, "")
    if not re.fullmatch("[0-9]*", frac):
        return None
    groups = re.split("[ _'" + thou + "]", whole) if whole else [""]
    if len(groups) > 1 and not (
        re.fullmatch("[1-9][0-9]{0,2}", groups[0]) and all(re.fullmatch("[0-9]{3}", g) for g in groups[1:])
    ):
        return None
    return "".join(groups).lstrip("0") or "0", frac, note


def _same_unit(typed: str, unit: str) -> bool:
    """The exercise's own unit, or (for a unit the table does not know, "GPUs") its singular."""
    t, u = typed.lower(), unit.lower()
    if t == u:
        return True
    return u not in UNITS and t in (u[:-1] if u.endswith("s") else None, u[:-2] if u.endswith("es") else None)


def read_prediction(text: str, unit: str = "") -> Reading:
    """Read a typed prediction as a number in ``unit`` (see the module's rules), or refuse it with a message.

    >>> read_prediction("−1_000,5 %", "%").echo, read_prediction("0x37").error
    ('−1,000.5 %', 'Could not read “0x37”: hexadecimal numbers are not read; type the number in decimal.')
    """
    shown = squash(text)
    quoted = re.sub("[ \t\n\r\f\v]+", " ", text or "").strip(" ")  # as typed, for messages
    if not shown:
        return Reading(None, error="Type a prediction first, or press Show me.")
    if len(shown) > MAX_CHARS:
        return _refuse(quoted, f"a prediction has at most {MAX_CHARS} characters")
    s = _ascii_digits(shown)
    if _HEX.match(s):
        return _refuse(quoted, "hexadecimal numbers are not read; type the number in decimal")
    if s.lstrip("+-" + MINUS).lower() in _NOT_FINITE:
        return _refuse(quoted, "type a finite number")
    m = _NUMBER.match(s)
    if not m:
        return _refuse(quoted, "not a number")
    sign, num, exp, rest = m.groups()
    parts = _numeral(num)
    if parts is None:
        return _refuse(quoted, "the digit groups do not read as thousands (groups of three digits)")
    whole, frac, note = parts
    exp = (exp or "").replace(MINUS, "-")
    x = float(f"{whole}.{frac or '0'}e{exp or '0'}")
    nonzero = (whole + frac).strip("0") != ""
    if sign in ("-", MINUS):
        x = -x
    echo = (MINUS if sign in ("-", MINUS) and nonzero else "") + _group(whole) + ("." + frac if frac else "")
    if exp:
        echo += "e" + (MINUS if exp[0] == "-" else "") + (exp.lstrip("+-").lstrip("0") or "0")
    if not math.isfinite(x):
        return _refuse(quoted, "too large to compare")
    if nonzero and x == 0:
        return _refuse(quoted, "too small to compare")
    if not nonzero:
        x = 0.0
    suffix = f" {unit}" if unit else ""
    typed = rest.strip(" ")
    if not typed or _same_unit(typed, unit):
        return Reading(x, echo + suffix, note)
    have, want = UNITS.get(typed.lower()), UNITS.get(unit.lower())
    if have is None:
        return _refuse(quoted, f"“{_clip(typed, 20)}” after the number is not a unit this page knows")
    if want is None or have[0] != want[0]:
        return _refuse(quoted, f"{have[2]} cannot be converted to {unit or 'a plain number'}")
    if have[1] == want[1]:
        return Reading(x, echo + suffix, note)
    value = x * have[1] / want[1]
    if not math.isfinite(value) or (nonzero and value == 0):
        return _refuse(quoted, "too large to compare" if value else "too small to compare")
    return Reading(value, f"{echo} {have[2]} = {fmt_sig(value, 4)}{suffix}", note)


# ---------------------------------------------------------------------------------------------- grading


def grade(x: float, value: float, text: str, unit: str = "", digits: int = 1, tolerance: float = 0.05) -> str:
    """'The library says 55.6 GB. Your prediction is off by +2.4 GB (+4 %): ✓ within 5 %.' for a read
    prediction ``x`` against the library's ``value`` (its ``text``)."""
    head = f"The library says {text}."
    if not math.isfinite(value):
        return head
    suffix = " percentage points" if unit == "%" else (f" {unit}" if unit else "")
    d = x - value
    sign = "+" if d >= 0 else MINUS
    if value == 0:
        if d == 0:
            return f"{head} ✓ Exact."
        return f"{head} Your prediction is off by {sign}{fmt_fixed(abs(d), digits)}{suffix}: ✗ off."
    rel = abs(d) / abs(value)
    ratio = x / value
    if rel > 10:
        times = fmt_sig(ratio, 2) if math.isfinite(ratio) else ("more than 1e308" if ratio > 0 else "less than −1e308")
        detail = f"Your prediction is {times} × the answer"
    else:
        detail = (
            f"Your prediction is off by {sign}{fmt_fixed(abs(d), digits)}{suffix} "
            f"({sign}{math.floor(100 * rel + 0.5)} %)"
        )
    if rel <= tolerance:
        verdict = f"✓ within {math.floor(100 * tolerance + 0.5)} %"
    elif rel <= 0.25:
        verdict = "≈ within 25 %"
    elif 0.1 <= ratio <= 10:
        verdict = "~ right order of magnitude (within a factor of 10)"
    elif ratio < 0:
        verdict = "✗ off: the sign is wrong"
    else:
        verdict = "✗ off by more than a factor of 10"
    return f"{head} {detail}: {verdict}."


def compare(prediction: str, result: Result, unit: str = "", digits: int = 1, tolerance: float = 0.05) -> str:
    """The feedback line for a typed prediction against the library's ``result`` (plain text). An empty or
    unreadable prediction gets a message and never the answer.

    >>> compare("nvlink", Result("NVLink", "NVLink"))
    'You predicted “nvlink”. The library says NVLink. ✓ Your prediction matches.'
    """
    if result.error:
        return f"Not a valid combination: {result.error}"
    typed = squash(prediction)
    if not typed:
        return "Type a prediction first, or press Show me."
    if isinstance(result.value, str):
        ok = typed.lower() == squash(result.value).lower()
        return f"You predicted “{_clip(typed)}”. The library says {result.text}. " + (
            "✓ Your prediction matches." if ok else "✗ No match."
        )
    if result.value is None:
        return f"The library says {result.text}."
    r = read_prediction(prediction, unit)
    if r.error or r.value is None:
        return r.error or ""
    return f"{r.sentence} {grade(r.value, result.value, result.text, unit, digits, tolerance)}"


def reveal(result: Result) -> str:
    """What "Show me" prints: the answer, and that the prediction was skipped."""
    if result.error:
        return f"Not a valid combination: {result.error}"
    return f"You skipped the prediction. The library says {result.text}."
