"""jsonargparse's type errors, as one paragraph that names the option, the value and the fix.

A value the signature's type refuses (`num_workers: NonNegativeInt | Literal["auto"]`
given -1) is reported by jsonargparse as the tree of every type it tried, at every level:
the `data:` union (a DataModule or None), the class named there, then the argument's own
union, some 15 lines in which "-1" appears twice and the option's name never. Only the
innermost level tells what was wrong; `one_paragraph` keeps that level and names the
option as typed on the command line:

    --data.num_workers -1 (GratingsDataModule): not a NonNegativeInt (-1 does not
    conform to restriction v>=0), or not 'auto'. `... fit --data.help GratingsDataModule`
    lists what each of its arguments takes.

A message of another shape (an unknown option, a missing file) is returned unchanged.
The messages read are jsonargparse 4.x's from 4.43: pyproject.toml bounds it to
`>=4.43,<5`, and the tests of these paragraphs (the library's tests/test_bad_input.py) pass
on both ends, 4.43 (with the other lowest versions the library allows) and the newest 4.x.
"""

import re

KEY = re.compile(r'Parser key "([^"]+)":')
CLASS = re.compile(r"Problem with given class_path '([^']+)'")
GIVEN = re.compile(r"^Given value: (.*?)(?:\. Got value: .*)?$")
GOT = re.compile(r"\. Got value: (.*)$")
RESTRICTED = re.compile(r": (\S+) does not conform to restriction")
NESTED = re.compile(r"NestedArg\(key='[^']*', val='(.*)'\)")
SKIPPED = (
    "Subtypes:",
    "Errors:",
    "Given value",
    "Does not validate against any",
    "Expected a path but",  # jsonargparse also tried the value as a config file
)
# What jsonargparse says a value was not -> the type a user writes, with its restriction.
EXPECTED = (
    (re.compile(r"^Not of type (\w+): .*?restriction (.+)$"), r"\1 (\2)"),
    (re.compile(r"^Not of type (\w+):.*$"), r"\1"),
    (re.compile(r"^Expected an? (.+?)(?:\. Got value: .*)?$"), r"\1"),
)
SPELLING = (
    (re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>"), r"\1"),  # <class 'int'> -> int
    (re.compile(r"typing\.Literal\[(.*?)\]"), r"\1"),  # typing.Literal['auto'] -> 'auto'
    (re.compile(r"\bNoneType\b"), "null"),
)


def one_paragraph(message: str, prog: str) -> str:
    """`message` from jsonargparse as one paragraph, when it is a type error of one option."""
    keys = KEY.findall(message)
    if not keys:
        return message
    start = message.rfind(f'Parser key "{keys[-1]}":')
    first, _, rest = message[start:].partition("\n")
    head = first.split(":", 1)[1].strip()
    block = [line for line in [head, *_block(rest)] if line]
    lines = [line for line in block if not line.startswith(SKIPPED)]
    if not lines:
        return message
    expected = [_expected(line) for line in lines]
    if all(expected):
        problem = "expected " + " or ".join(_spelled(str(item)) for item in expected)
    else:
        problem = "; ".join(_spelled(line) for line in lines)
    classes = CLASS.findall(message[:start])
    owner = classes[-1].rsplit(".", 1)[-1] if classes else None
    where = f"--{'.'.join(keys)}{_value(block, message)}" + (f" ({owner})" if owner else "")
    if owner:
        fix = f"`{prog} --{keys[0]}.help {owner}` lists what each of its arguments takes."
    else:
        fix = f"`{prog} --help` lists what each option takes."
    return f"{where}: {problem}. {fix}"


def _block(text: str) -> list[str]:
    """The lines of the innermost key's block: those indented under its first line."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return []
    indent = len(lines[0]) - len(lines[0].lstrip())
    block = []
    for line in lines:
        if len(line) - len(line.lstrip()) < indent:
            break
        block.append(line.strip().removeprefix("- "))
    return block


def _value(block: list[str], message: str) -> str:
    """The value as given: where the innermost block names it, else as typed (`--key=value`)."""
    for pattern in (GIVEN, GOT, RESTRICTED):
        for line in block:
            if found := pattern.search(line):
                return f" {found.group(1)}"
    found = NESTED.search(message)
    return f" {found.group(1)}" if found else ""


def _expected(line: str) -> str | None:
    for pattern, replacement in EXPECTED:
        if pattern.match(line):
            return pattern.sub(replacement, line)
    return None


def _spelled(text: str) -> str:
    for pattern, replacement in SPELLING:
        text = pattern.sub(replacement, text)
    return text.strip().rstrip(".")
