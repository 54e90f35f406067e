"""Where a search matched in a session: its entries that hold the search's words, best first,
each with a snippet of its text around the match.

An entry's score is how many of the search's words (``words.query_words``) start a word in its
text, as a session matches (``words.text_matches``); hits come in order of score, then newest
first (the order the entries were appended in, ``EntryHit.place``), the same in every store,
each saying whether it is on the session's current branch. A snippet is at most
``SNIPPET_CHARS`` characters of the entry's own text (accents and case as written), whitespace
runs one space, each matched word marked ``«so»``, and ``…`` where it is cut: cut between words
where one is near, never inside a character drawn with several (an emoji with a skin tone, a
flag, a letter and its accent).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from typing import Any

from mcp_agent.sessions.entries import MessageEntry, SessionEntry, entry_text
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.words import CJK_CHARS, latin_folds, search_text, word_pattern

# Characters of an entry's text a snippet shows (the marks and ellipses aside).
SNIPPET_CHARS = 160
# How far a cut looks for a place between words before it cuts a word.
_SLACK = 24
# Hits one page of a session's search holds at most.
MAX_HITS = 100
# The hits a listing shows of each session it found (a search in the session has them all).
HITS_LISTED = 3
# Listed sessions whose first hits a store with a text index finds in one query: a page of the
# default limit (50) in one. Each query reads every hit of the words in the whole index (SQLite:
# FTS5 finds them, then keeps those of these sessions), so a page of 20 in chunks of 16 read
# them twice, and its listing three times in all.
SESSIONS_PER_SEARCH = 50
MARK_OPEN, MARK_CLOSE = "«", "»"


@dataclass
class EntryHit:
    """An entry that holds ``score`` of the search's words; ``place``: a number that orders
    the session's entries as appended (a store's own: its position, or its row's number);
    ``on_branch``: whether it is on the session's current branch (the path from the root to
    the leaf, as the search found it)."""

    entry: SessionEntry
    place: int
    score: int
    on_branch: bool
    # The JSON of the hit last given, and for which words: a hit kept for the next listing
    # (``sql.repo.kept_hits``) cuts its snippet once.
    _shown: tuple[tuple[str, ...], dict[str, Any]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def role(self) -> str | None:
        """The message's role (user, assistant, toolResult, …); None for other entries."""
        if isinstance(self.entry, MessageEntry):
            return str(self.entry.message.role)
        return None

    def to_json_dict(self, words: list[str]) -> dict[str, Any]:
        """The hit as answers give it, its snippet shown for ``words`` (the search's)."""
        said = tuple(words)
        if self._shown is not None and self._shown[0] == said:
            return dict(self._shown[1])
        shown = {
            "entryId": self.entry.id,
            "type": self.entry.type,
            "role": self.role,
            "timestamp": self.entry.timestamp,
            "words": self.score,
            "onBranch": self.on_branch,
            "snippet": snippet(entry_text(self.entry), words),
        }
        self._shown = (said, shown)
        return dict(shown)


@dataclass
class HitPage:
    """A page of a session's hits, best first; ``total``: every entry that holds a word;
    ``tag``: the search's (``search_tag``), which its cursors carry."""

    hits: list[EntryHit]
    total: int
    next_cursor: str | None
    tag: str = ""

    def cursor_after(self, count: int) -> str:
        """The cursor of the page after this page's first ``count`` hits."""
        return hit_cursor(self.hits[count - 1], self.tag)


# --- paging -----------------------------------------------------------------------------------


def search_tag(session_id: str, words: list[str]) -> str:
    """What a search's cursors are tagged with, so that one of another search (another
    session, other words) is refused rather than skipping this one's hits."""
    named = json.dumps([session_id, words], ensure_ascii=False).encode()
    return hashlib.blake2b(named, digest_size=4).hexdigest()


def hit_cursor(hit: EntryHit, tag: str) -> str:
    """The cursor of the page after ``hit``: its score and place, and the search's tag."""
    raw = json.dumps([hit.score, hit.place, tag], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_hit_cursor(cursor: str, tag: str) -> tuple[int, int]:
    """(score, place) of the last hit of the page before, or a SessionError saying the cursor
    is not one this search (``tag``) handed out."""
    said = "pass the nextCursor of the previous page of this search"
    if len(cursor) <= 64:
        try:
            score, place, tagged = json.loads(
                base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            )
            if type(score) is int and type(place) is int and tagged == tag:
                return score, place
            if type(score) is int and type(place) is int:
                said = "it is another search's (another session or other words): " + said
        except (ValueError, TypeError):
            pass
    raise SessionError("invalid_argument", f"invalid cursor {cursor[:60]!r}: {said}")


def check_hits_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_HITS:
        raise SessionError("invalid_argument", f"limit must be 1 to {MAX_HITS}, not {limit}")


def scored(
    entries: Iterable[SessionEntry], words: list[str], branch: Container[str]
) -> list[EntryHit]:
    """Each of ``entries`` (every entry, in the order appended) that holds one of ``words``
    or more, with its score, and whether it is on ``branch`` (the ids of the current
    branch's entries): for a store that searches without an index."""
    patterns = [word_pattern(word) for word in words]
    found = []
    for place, entry in enumerate(entries):
        text = entry_text(entry)
        if not text:
            continue
        searched = search_text(text.lower())
        score = sum(1 for pattern in patterns if pattern.search(searched))
        if score:
            found.append(EntryHit(entry, place, score, entry.id in branch))
    return found


def page_scored(found: list[EntryHit], limit: int, cursor: str | None, tag: str) -> HitPage:
    """A page of ``scored``'s hits, best first, after ``cursor`` (of the search ``tag``)."""
    check_hits_limit(limit)
    ordered = sorted(found, key=lambda hit: (hit.score, hit.place), reverse=True)
    total = len(ordered)
    if cursor is not None:
        after = parse_hit_cursor(cursor, tag)
        ordered = [hit for hit in ordered if (hit.score, hit.place) < after]
    page = ordered[:limit]
    more = len(ordered) > limit
    return HitPage(page, total, hit_cursor(page[-1], tag) if more else None, tag)


# --- snippets ---------------------------------------------------------------------------------


@functools.cache
def _unfolds() -> dict[str, str]:
    """Each base letter, and the letters with a diacritic that fold to it."""
    found: dict[str, str] = {}
    for letter, base in latin_folds().items():
        found[base.lower()] = found.get(base.lower(), "") + letter
    return found


@functools.cache
def _cjk_char() -> re.Pattern[str]:
    return re.compile(f"[{CJK_CHARS}]")


def _as_written(word: str, accents: bool = True) -> str:
    """``word`` (a search word) as it may be written in an entry's own text, lowercased: a
    letter with an accent for its base letter, CJK characters of a phrase with or without
    spaces between them; a whole word marked, not the start that matched. The word's start is
    checked after its first character, so that the search looks for that character first
    (checked before it, the search took 0.8 s a word over 6 MB of text). Without ``accents``
    (for ASCII text) a letter is only itself: the search looks for a string, not a set."""
    unfolds = _unfolds() if accents else {}
    chars: list[str] = []
    for part in word.split(" "):
        if chars:
            chars.append(r"\s*")
        if _cjk_char().fullmatch(part):
            chars.append(re.escape(part))
            continue
        chars.extend(
            f"[{re.escape(char + unfolds[char])}]" if char in unfolds else re.escape(char)
            for char in part
        )
    word_char = rf"[^\W{CJK_CHARS}]"
    first_is_cjk = _cjk_char().fullmatch(word.split(" ")[0]) is not None
    last_is_cjk = _cjk_char().fullmatch(word.split(" ")[-1]) is not None
    # Not after a letter or digit of a word (CJK characters are words of their own).
    start = "" if first_is_cjk else rf"(?<!{word_char}[\s\S])"
    end = "" if last_is_cjk else f"{word_char}*"
    return chars[0] + start + "".join(chars[1:]) + end


@functools.lru_cache(maxsize=256)
def _matcher(words: tuple[str, ...], ignore_case: bool, accents: bool) -> re.Pattern[str]:
    """Any of ``words`` as written (``_as_written``): the longest first, so a phrase is
    marked whole rather than its first character."""
    ordered = sorted(set(words), key=len, reverse=True)
    written = "|".join(_as_written(word, accents) for word in ordered)
    return re.compile(written, re.IGNORECASE if ignore_case else 0)


def _first_match(searched: str, words: list[str], ignore_case: bool, accents: bool) -> int:
    """Where the first of ``words`` starts in ``searched``, or -1. A word at a time, each
    searched only up to the first found so far: one pattern of them all is tried at every
    position (a second or more over megabytes), one word's skips to its first character."""
    first = -1
    for word in words:
        end = len(searched) if first < 0 else first
        if not accents and searched.find(word, 0, end) < 0:  # a string: found at C speed
            continue
        found = _matcher((word,), ignore_case, accents).search(searched, 0, end)
        if found is not None:
            first = found.start()
    return first


def _joins(text: str, index: int) -> bool:
    """Whether the character at ``index`` is drawn with the one before it (a cut there would
    split what a reader sees as one character)."""
    if index <= 0 or index >= len(text):
        return False
    char, before = text[index], text[index - 1]
    code = ord(char)
    return (
        before == "\u200d"  # zero-width joiner: a family, a profession
        or char == "\u200d"
        or unicodedata.category(char) in ("Mn", "Me", "Mc")
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0x1F3FB <= code <= 0x1F3FF  # skin tones
        or 0xE0020 <= code <= 0xE007F  # tags (the flags of Scotland, Wales)
        or (_flag_letter(char) and _flag_letters_before(text, index) % 2 == 1)  # a flag's pair
    )


def _flag_letter(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def _flag_letters_before(text: str, index: int) -> int:
    count = 0  # up to a bound: a cut in a run of thousands of flags may split one
    while count < 256 and index - count > 0 and _flag_letter(text[index - count - 1]):
        count += 1
    return count


def _inside_word(text: str, index: int) -> bool:
    if index <= 0 or index >= len(text):
        return False
    before, char = text[index - 1], text[index]
    cjk = _cjk_char()
    return (
        before.isalnum() and char.isalnum() and not cjk.match(before) and not cjk.match(char)
    ) or _joins(text, index)


def _cut(text: str, index: int, low: int, high: int) -> int:
    """A place to cut ``text`` near ``index``, within ``low``..``high``: at a space if one is
    near, else between words, else between characters as drawn."""
    index = max(low, min(high, index))
    near = range(max(low, index - _SLACK), min(high, index + _SLACK) + 1)
    by_distance = sorted(near, key=lambda i: abs(i - index))

    def at_space(i: int) -> bool:
        return i in (0, len(text)) or text[i - 1].isspace() or text[i].isspace()

    fits: list[Callable[[int], bool]] = [
        at_space,
        lambda i: not _inside_word(text, i),
        lambda i: not _joins(text, i),
    ]
    for fit in fits:
        for place in by_distance:
            if fit(place):
                return place
    return index


def snippet(text: str, words: list[str], chars: int = SNIPPET_CHARS) -> str:
    """Up to ``chars`` characters of ``text`` around the first place one of ``words`` (search
    words) starts a word, every matched word in them marked (see the module's doc)."""
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    # Searched lowercased (as fast as a search gets), or as written where lowercasing changes
    # the text's length (İ is two characters lowercased): the places found are the text's.
    lowered = text.lower()
    same = len(lowered) == len(text)
    searched = lowered if same else text
    accents = not text.isascii()
    matcher = _matcher(tuple(words), not same, accents)
    first = _first_match(searched, words, not same, accents)
    anchor = matcher.match(searched, first) if first >= 0 else None
    if len(text) <= chars:
        start, end = 0, len(text)
    elif anchor is None:
        start, end = 0, _cut(text, chars, 1, chars)
    else:
        # Some words of context before the match, the rest after it.
        lead = min(anchor.start(), chars // 4)
        start = _cut(text, anchor.start() - lead, 0, anchor.start())
        most = min(len(text), start + chars)
        end = _cut(text, most, min(anchor.end(), most), most)  # a word too long: cut in it
    spans = [m.span() for m in matcher.finditer(searched, start, end) if m.end() > m.start()]
    pieces: list[str] = ["…"] if start > 0 else []
    at = start
    for span_start, span_end in spans:
        pieces.append(text[at:span_start])
        pieces.append(MARK_OPEN + text[span_start : min(span_end, end)] + MARK_CLOSE)
        at = min(span_end, end)
    pieces.append(text[at:end])
    if end < len(text):
        pieces.append("…")
    return re.sub(r"\s+", " ", "".join(pieces)).strip()
