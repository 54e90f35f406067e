"""The words of a search, and of the text it searches, alike in every store.

A word is a run of letters and digits; a session matches a search when each of the search's
words starts a word somewhere in it. Chinese and Japanese are written without spaces, so a run
of their characters would be one word, and a search for 天気 would miss 東京の天気は晴れ.
Each Han, kana or CJK-compatibility character is therefore a word of its own, and a search word
holding several is a phrase of them: 天気 matches where 天 is followed by 気, anywhere. Stored
search text (``search_text``) and search words (``query_words``) are split by the same rule, so the
full-text indexes of SQLite (FTS5's unicode61) and PostgreSQL (``simple``) need no tokenizer of
their own. Latin letters are folded to their base letter (é to e), as SQLite's tokenizer
does on its own and PostgreSQL's ``simple`` does not: ``cafe`` finds café in every store.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

from mcp_agent.sessions.errors import SessionError

# Words in one search: each is a term of the full-text query, and SQLite refuses deep ones.
MAX_SEARCH_WORDS = 32
# Characters in one search, checked before any is split into words: a query of megabytes
# (four of them fit in an HTTP request) held the interpreter for seconds while it was split,
# every other client's answer waiting, only to be refused for its words; a run of Chinese or
# Japanese is one phrase of any length.
MAX_SEARCH_CHARS = 1_000

# Han (with extensions and compatibility ideographs), hiragana, katakana (with its phonetic
# extensions and half-width forms), and the iteration marks written among them. Hangul is not
# here: Korean separates its words with spaces.
CJK_CHARS = (
    "\u3005\u3006\u3007\u3021-\u3029\u3038-\u303b"
    "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)


# Made at the first text that is not ASCII, not at import: compiling the ranges takes tens of
# milliseconds, and a server's start waits for its imports.
@functools.cache
def _cjk() -> re.Pattern[str]:
    return re.compile(f"([{CJK_CHARS}])")


@functools.cache
def latin_folds() -> dict[str, str]:
    """Each precomposed Latin letter with a diacritic, and its base letter."""
    folds = {}
    for code in (*range(0xC0, 0x250), *range(0x1E00, 0x1F00)):
        letter = chr(code)
        base = "".join(
            c for c in unicodedata.normalize("NFD", letter) if unicodedata.category(c) != "Mn"
        )
        if base != letter and len(base) == 1:
            folds[letter] = base
    return folds


@functools.cache
def _fold() -> dict[int, str]:
    return str.maketrans(latin_folds())


def search_text(text: str) -> str:
    """``text`` as stored for a search to match: Latin letters folded, and a space either side
    of each CJK character, so that every word splitter takes each for a word of its own."""
    if text.isascii():
        return text
    if not unicodedata.is_normalized("NFC", text):  # é written as e and a combining accent
        text = unicodedata.normalize("NFC", text)
    return _cjk().sub(r" \1 ", text.translate(_fold()))


def query_words(query: str | None) -> list[str]:
    """The words of a search, lowercased; a run of CJK characters is one word of them each
    separated by a space (a phrase). No search (None, empty or blanks) has none; text with no
    word is refused, as nothing could tell a session that matches it from one that does not
    (taken as no search, it would list every session as a match)."""
    if query and len(query) > MAX_SEARCH_CHARS:
        raise SessionError(
            "invalid_argument",
            f"a search takes at most {MAX_SEARCH_WORDS} words and {MAX_SEARCH_CHARS:,}"
            f" characters, not {len(query):,} characters: search for fewer words",
        )
    words = (
        [" ".join(search_text(w).split()) for w in re.findall(r"\w+", query.lower())]
        if query
        else []
    )
    if query and not words and not query.isspace():
        shown = query if len(query) <= 60 else query[:60] + "…"
        raise SessionError(
            "invalid_argument",
            f"the search {shown!r} has no words to search for (letters or digits): give words,"
            " or no query for every session",
        )
    if len(words) > MAX_SEARCH_WORDS:
        raise SessionError(
            "invalid_argument",
            f"a search takes at most {MAX_SEARCH_WORDS} words, not {len(words)}: use fewer",
        )
    return words


def search_words(query: str) -> list[str]:
    """``query_words`` of a search that must have words (one session's: no query lists
    nothing there)."""
    words = query_words(query)
    if not words:
        raise SessionError("invalid_argument", "query is empty: give words to search for")
    return words


@functools.lru_cache(maxsize=256)
def word_pattern(word: str) -> re.Pattern[str]:
    """What ``word`` (``query_words``'s) matches in search text (``search_text``, lowercased):
    it starts a word, and the characters of a CJK phrase follow one another."""
    return re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, word.split(" "))))


def text_matches(words: list[str], texts: Iterable[str]) -> bool:
    """Whether each of ``words`` (``query_words``'s) starts a word in one of ``texts``."""
    remaining = {word: word_pattern(word) for word in words}
    for text in texts:
        if not remaining:
            break
        lowered = search_text(text.lower())
        remaining = {w: p for w, p in remaining.items() if not p.search(lowered)}
    return not remaining
