"""The README's examples run as written."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from providers_support import FakeLlm
from providers_support import fakellm_fixture as fakellm_fixture

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


@pytest.mark.parametrize(
    "code", [b for b in blocks("python") if "await " not in b], ids=lambda b: b.splitlines()[0]
)
def test_python_examples_run(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})


def test_models_toml_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_agent.providers.registry import reload_registry, resolve_model

    [toml] = blocks("toml")[:1]
    path = tmp_path / "models.toml"
    path.write_text(toml)
    monkeypatch.setenv("MCP_AGENT_MODELS", str(path))
    try:
        reload_registry(path)
        model = resolve_model("lmstudio:qwen2.5-7b-instruct")
        assert model.context_window == 32768
        assert model.base_url == "http://127.0.0.1:1234/v1"
    finally:
        monkeypatch.delenv("MCP_AGENT_MODELS")
        reload_registry()


def test_agent_manifest_example_is_valid() -> None:
    import tomllib

    from mcp_agent.manifests import AgentManifest

    manifest = next(b for b in blocks("toml") if b.startswith('name = "reviewer"'))
    agent = AgentManifest.model_validate(tomllib.loads(manifest))
    assert agent.allows_tool("git__diff") and not agent.allows_tool("web__fetch")


def section(title: str) -> str:
    """The README's text under a heading, up to the next heading of any level."""
    start = README.index(f"\n{title}\n")
    following = re.search(r"\n#+ ", README[start + 1 :])
    return README[start : start + 1 + following.start()] if following else README[start:]


def test_the_serve_section_names_every_flag_of_serve() -> None:
    import typer

    from mcp_agent.cli import app

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    flags = {name for p in serve.params for name in p.opts if name.startswith("--")}
    said = section("### serve")
    assert sorted(f for f in flags - {"--help"} if f"`{f}" not in said) == []


def zero_meaning(text: str) -> str | None:
    """What ``0: …`` says in a flag's help or README text, up to its bracket, comma or end."""
    found = re.search(r"\b0: ([a-z -]+?)\s*(?:[(;,|)]|$)", text)
    return found.group(1) if found else None


def test_the_readme_says_what_0_means_for_a_flag_in_its_help_s_words() -> None:
    import typer

    from mcp_agent.cli import app

    helps: dict[str, str] = {}
    commands = [typer.main.get_command(app)]
    while commands:
        command = commands.pop()
        commands.extend(getattr(command, "commands", {}).values())
        for param in command.params:
            meaning = zero_meaning(" ".join((getattr(param, "help", None) or "").split()))
            helps.update((name, meaning) for name in param.opts if meaning)
    # Each README row or sentence that names a flag and then what 0 means for it.
    said = re.findall(r"`(--[a-z-]+)`([^.|]*?\b0: [^.|]*)", README.replace("\n", " "))
    wrong = [
        (flag, zero_meaning(rest), helps[flag])
        for flag, rest in said
        if flag in helps and zero_meaning(rest) != helps[flag]
    ]
    assert said and wrong == []


def test_the_fake_llm_of_the_run_example_is_said_how_to_start(tmp_path: Path) -> None:
    """The `run` example talks to "a local fake LLM" on port 18988, and a reader had no way to
    start it: the README names the command, of the test extra's fakellm, and its rules file
    answers the example's prompts."""
    import subprocess

    [command] = re.findall(r"`(\.venv/bin/fakellm serve [^`]*)`", README)
    words = shlex.split(command)
    assert "18988" in words and "OPENAI_BASE_URL=http://127.0.0.1:18988/v1" in README
    config = Path(__file__).resolve().parent.parent / words[words.index("--config") + 1]
    rules = config.read_text(encoding="utf-8")
    assert "Please ask a helper to greet the team" in rules
    fakellm = Path(sys.executable).with_name("fakellm")
    if fakellm.exists():  # the options it names are the installed fakellm's
        shown = subprocess.run([fakellm, "serve", "--help"], capture_output=True, text=True)
        assert all(flag in shown.stdout for flag in words if flag.startswith("--")), shown


# Read by the tests and .ci/run, not by the package.
TEST_VARIABLES = {"MCP_AGENT_CHROMIUM", "MCP_AGENT_FULL", "MCP_AGENT_PEERS"}


def test_the_environment_variables_named_are_the_ones_read() -> None:
    package = Path(__file__).resolve().parent.parent / "mcp_agent"
    code = "\n".join(p.read_text(encoding="utf-8") for p in package.rglob("*.py"))
    named = set(re.findall(r"\bMCP_AGENT_[A-Z_]*[A-Z]\b", README)) - TEST_VARIABLES
    read = set(re.findall(r"[\"'](MCP_AGENT_[A-Z_]*[A-Z])[\"']", code))
    assert sorted(named - read) == [] and sorted(read - named) == []


def masked(text: str) -> list[str]:
    """A transcript's lines with what differs from run to run (ids, dates) made alike."""
    text = re.sub(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", "<session>", text)
    text = re.sub(r"\b[0-9a-f]{8}\b", "<entry>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d", "<date>", text)
    return [line.rstrip() for line in text.strip().splitlines()]


@pytest.fixture
def columns_80(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A terminal of 80 columns, the README's transcripts' width, for the commands run in
    this process (their consoles are made once: anew before and after)."""
    monkeypatch.setenv("COLUMNS", "80")
    fresh_consoles()
    yield
    fresh_consoles()


def fresh_consoles() -> None:
    """The command line's consoles made anew, at $COLUMNS as it is (each is made once)."""
    from mcp_agent.cli.common import err, out

    out.cache_clear()
    err.cache_clear()


@pytest.mark.usefixtures("columns_80")
def test_the_first_chat_transcript_is_what_chat_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The transcript's token counts had drifted from what scripted:echo counts.
    from typer.testing import CliRunner

    from mcp_agent.cli import app

    command = "$ printf 'Plan a picnic\\nAdd sandwiches\\n/tree\\n/quit\\n' | "
    [block] = [b for b in blocks("text") if b.startswith(command)]
    said = block.splitlines()
    monkeypatch.setenv("MCP_AGENT_DB", str(tmp_path / "sessions.db"))
    monkeypatch.delenv("MCP_AGENT_MODEL", raising=False)
    lines = "Plan a picnic\nAdd sandwiches\n/tree\n/quit\n"
    result = CliRunner().invoke(app, ["chat", "--model", "scripted:echo"], input=lines)
    assert result.exit_code == 0, result.output
    assert masked(result.output) == masked("\n".join(said[1:]))
    # Its fork before the second question, as the fork example forks before one.
    [ask] = re.findall(r"(\w{8}) user: Add sandwiches", result.output)
    [session] = re.findall(r"^session ([\w-]+) ", result.output, flags=re.MULTILINE)[:1]
    forked = CliRunner().invoke(app, ["sessions", "fork", session, "--entry", ask])
    [example] = re.findall(r"forked \S+ into a new session \(\d+ entries\)", README)[:1]
    assert masked(forked.stderr) == masked(example)


# What differs from run to run, made alike: ids (sessions, entries, runs), times, cursors.
MASKS = [
    (r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", "<session>"),
    (r"\b[0-9a-f]{12}\b", "<run>"),
    (r"\b[0-9a-f]{8}\b", "<entry>"),
    (r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>"),
    (r"\d{4}-\d\d-\d\d \d\d:\d\d|\b\d\d-\d\d \d\d:\d\d\b", "<time>"),
    (r'"nextCursor": "[^"]+"', '"nextCursor": "<cursor>"'),
]


def ids_in(text: str) -> list[str]:
    return re.findall(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b|\b[0-9a-f]{8}\b", text)


def mask(text: str) -> str:
    for pattern, said in MASKS:
        text = re.sub(pattern, said, text)
    return text


class Replay:
    """The README's transcripts run in order in one database: each command (ids the README
    shows translated to the ones made here, learnt from the outputs as they come) and what it
    printed, stdout and stderr as a terminal shows them."""

    def __init__(self, work: Path, fakellm: FakeLlm) -> None:
        self.work, self.fakellm = work, fakellm
        self.ids: dict[str, str] = {}

    def command(self, line: str) -> str:
        """What ``$ line`` prints here, ``; echo "exit $?"`` and ``| head -N`` as the shell
        does them."""
        from typer.testing import CliRunner

        from mcp_agent.cli import main

        for shown, made in self.ids.items():
            line = line.replace(shown, made)
        line, said_exit = re.subn(r'; echo "exit \$\?"$', "", line)
        head = re.search(r" \| head -(\d+)$", line)
        line = line[: head.start()] if head else line
        if line.startswith("head -n "):
            _, _, count, name = line.split()
            return "".join((self.work / name).read_text().splitlines(True)[: int(count)])
        if "pi/broken.jsonl" in line:  # what the README's broken file holds: an id twice
            picnic = (self.work / "picnic.jsonl").read_text().splitlines(True)
            (self.work / "pi" / "broken.jsonl").write_text("".join([*picnic[:2], picnic[1]]))
        printf = re.match(r"printf '([^']*)' \| (.*)", line)
        given = printf.group(1).replace("\\n", "\n") if printf else None
        words = shlex.split(printf.group(2) if printf else line)
        env: dict[str, str | None] = {}
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            env[name] = re.sub(r"http://127.0.0.1:\d+/v1", self.fakellm.openai_base_url, value)
        assert words.pop(0) == "mcp-agent-sessions", line
        fresh_consoles()
        # The console script itself (its usage errors are one line), in this process.
        code: object = None
        with CliRunner().isolation(input=given, env=env) as (_, _, output):
            sys.argv = ["mcp-agent-sessions", *words]
            try:
                main()
            except SystemExit as end:
                code = end.code
            printed = output.getvalue().decode()
        if head:
            printed = "".join(printed.splitlines(True)[: int(head.group(1))])
        if said_exit:
            return printed + f"exit {code}\n"
        assert code == 0, printed
        return printed

    def block(self, block: str) -> None:
        """Each command of a README transcript, its output checked against the README's."""
        for part in re.split(r"\n(?=\$ )", block.strip("\n")):
            line, *lines = part.split("\n")
            shown = [said for said in lines if said]
            printed = self.command(line[2:]).replace(str(self.work), "~/work")
            made = [said.rstrip() for said in printed.splitlines() if said]
            assert [mask(said) for said in made] == [mask(said) for said in shown], line
            for said, got in zip(shown, made, strict=True):
                self.ids.update(zip(ids_in(said), ids_in(got), strict=True))


# The transcripts replayed: of these commands, in one database, in the README's order.
REPLAYED = re.compile(
    r"\$ (?:OPENAI\S+ |printf '[^']*' \| )*mcp-agent-sessions (?:models|run|chat|sessions)"
)


@pytest.mark.usefixtures("columns_80")
def test_the_command_line_transcripts_are_what_the_commands_print(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakellm: FakeLlm
) -> None:
    """The README's transcripts of models, run, chat and sessions, replayed in order in one
    database at 80 columns: each command prints what the README shows, ids and times aside.
    Transcripts captured at another width, or of what commands no longer print, went stale."""
    httpx.post(f"{fakellm.base}/_fakellm/reset")  # the README's prompts as never seen
    work = tmp_path / "work"
    shutil.copytree(Path(__file__).parent / "data" / "pi", work / "pi")
    monkeypatch.chdir(work)
    monkeypatch.setenv("MCP_AGENT_DB", str(tmp_path / "sessions.db"))
    for name in ("MCP_AGENT_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # each command sets its own
    replay = Replay(work, fakellm)
    replayed = [block for block in blocks("text") if REPLAYED.match(block)]
    for block in replayed:
        replay.block(block)
    assert len(replayed) == 9  # models, run, the two chats and five of sessions


def test_the_pi_files_the_import_example_names_are_said_where_to_find() -> None:
    """The import transcript reads ``pi/v1.jsonl`` … and ``pi/broken.jsonl``, which a reader of
    the README had nowhere: the README now says the files are the checkout's ``tests/data/pi/``
    (there they are) and what the broken one, made for the example, holds."""
    named = set(re.findall(r"sessions import ((?:pi/\S+\.jsonl ?)+)", README)[0].split())
    named |= set(re.findall(r"sessions import pi/v3\.jsonl (pi/\S+\.jsonl)", README))
    assert "`pi/` is the checkout's `tests/data/pi/`" in README
    data = Path(__file__).resolve().parent / "data"
    made = {"pi/broken.jsonl"}
    assert made <= named and "`pi/broken.jsonl` is made for it" in README
    for name in named - made:
        assert (data / name).is_file(), name
