"""Names: what an instance may call itself, its GPU types and its domains (SPEC section 9).

Names become file names (``launch/DOMAIN.sh``), shell words, TOML and CSV
keys, HTML and Markdown labels.  So a name must match :data:`NAME_PATTERN`,
``^\\w[\\w.-]{0,63}$``: a Unicode letter, digit or underscore first (``北京``
passes), then also dots and hyphens, at most 64 characters.  Path separators,
``..`` at the start, quotes, ``$``, ``|``, spaces and control characters are
refused, never rewritten: the loader raises ``InputError`` naming the field.

:data:`Name` is the pydantic type that checks it; :func:`name_problem` says
what is wrong with a string (None when it is a valid name), for readers that
are not pydantic models (the measured matrices of ``planner import-network``).

>>> name_problem("north-1") is None, name_problem("北京") is None
(True, True)
>>> name_problem("../../escaped")
"'../../escaped' is not a valid name: it must start with a letter, digit or underscore"
>>> name_problem("alpha$(touch PWNED)")
"'alpha$(touch PWNED)' is not a valid name: '$' at position 5 is not a letter, digit, underscore, dot or hyphen"
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

NAME_PATTERN = r"^\w[\w.-]{0,63}$"
NAME_MAX = 64
_NAME = re.compile(r"\w[\w.-]{0,63}")  # fullmatch: '$' would also match before a final newline
WHY = "names become file names and shell words: use letters, digits, underscores, dots and hyphens"


def name_problem(value) -> str | None:
    """Why ``value`` is not a valid name (one sentence), or None when it is one."""
    if not isinstance(value, str):
        return f"a name is a string (got {value!r})"
    if _NAME.fullmatch(value):
        return None
    head = f"{value!r} is not a valid name"
    if not value:
        return f"{head}: it is empty"
    if not re.fullmatch(r"\w", value[0]):
        return f"{head}: it must start with a letter, digit or underscore"
    for i, c in enumerate(value):
        if not re.fullmatch(r"[\w.-]", c):
            return f"{head}: {c!r} at position {i} is not a letter, digit, underscore, dot or hyphen"
    return f"{head}: {len(value)} characters, at most {NAME_MAX}"


def _check(value: str) -> str:
    why = name_problem(value)
    if why is not None:
        raise ValueError(f"{why} ({WHY})")
    return value


Name = Annotated[str, AfterValidator(_check), Field(
    json_schema_extra={"pattern": NAME_PATTERN},
    description="a letter, digit or underscore (Unicode), then also dots and hyphens; at most 64 characters")]
