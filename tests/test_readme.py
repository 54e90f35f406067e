"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
    monkeypatch.setenv("COLUMNS", "100")
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
