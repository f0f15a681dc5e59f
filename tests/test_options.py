"""One declaration per operation: the options classes check their values, and the CLI's flags, the tools' JSON
schemas (hence MCP) and the Python API all come from them, with the same help, defaults and bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, require_module

from kernelpilot.cli.main import _register, cli
from kernelpilot.evaluate.runner import EvalOptions
from kernelpilot.options import OptionError, Options, from_json, json_schema, offered, param, params
from kernelpilot.tools import REGISTRY, call

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

# The CLI command made from each tool: its path under `kpilot`.
COMMANDS = {"isa_analyze": ("isa", "analyze"), "isa_diff": ("isa", "diff"), "isa_lanes": ("isa", "lanes"),
            "arch_info": ("arch", "show"),
            "check": ("check",), "bench": ("bench",), "eval": ("eval",), "profile": ("profile", "run"),
            "profile_diff": ("profile", "diff"), "optimize_start": ("optimize",), "runs": ("runs", "show"),
            "runs_export": ("runs", "export"), "docs_search": ("docs", "search"), "docs_show": ("docs", "show"),
            "docs_add": ("docs", "add"), "docs_list": ("docs", "list"), "docs_remove": ("docs", "remove"),
            "docs_ask": ("docs", "ask"), "target_list": ("target", "list"), "target_add": ("target", "add"),
            "target_remove": ("target", "remove"), "target_setup": ("target", "setup"),
            "target_test": ("target", "test"), "eval_batch": ("eval-batch",)}
# Tools for agents only: a person edits files and follows a run with `kpilot runs show`.
AGENT_ONLY = {"read_candidate", "write_candidate", "optimize_status"}


def test_every_operation_is_a_command_or_an_agents_tool():
    assert set(REGISTRY) == set(COMMANDS) | AGENT_ONLY


def test_every_command_is_made_from_an_options_class():
    """No command declares its options by hand: each is built by cli.spec.command (so each takes --json and
    --quiet), the servers and the guide installer included."""
    import click

    _register()

    def leaves(c, path):
        if isinstance(c, click.Group):
            for name, sub in c.commands.items():
                yield from leaves(sub, [*path, name])
        else:
            yield " ".join(path), {p.name for p in c.params}

    found = dict(leaves(cli, []))
    assert {"mcp", "skill install", "doctor", "runs serve"} <= set(found)
    assert not [name for name, ps in found.items() if not {"as_json", "quiet"} <= ps]


@dataclass(frozen=True, kw_only=True)
class Sample(Options):
    n: int = param("How many.", 3, minimum=1)
    rate: float | None = param("A rate.", exclusive_minimum=0)
    mode: str = param("The mode.", "a", choices=("a", "b"))
    files: tuple[Path, ...] = param("Files.", path=True)
    env: dict[str, str] = param("Pairs.", {})
    name: str = param("A name.", required=True, argument=True)


def test_an_options_class_checks_every_value_and_normalizes():
    s = Sample(name="x", files=["a", Path("b")], rate=2)
    assert s.files == (Path("a"), Path("b")) and s.rate == 2.0 and s.env == {} and s.n == 3
    for kwargs, needle in (({"n": 0}, "n must be at least 1, not 0"), ({"n": True}, "n must be an integer"),
                           ({"rate": 0}, "rate must be more than 0"), ({"rate": float("nan")}, "finite"),
                           ({"mode": "c"}, "mode must be one of a, b"), ({"files": "a"}, "files must be an array"),
                           ({"files": [1]}, "files[0] must be a string"), ({"env": {"K": 1}}, "env.K must be a string"),
                           ({"name": "a\x00b"}, "must not contain a NUL")):
        with pytest.raises(OptionError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            Sample(**{"name": "x", **kwargs})
    with pytest.raises(OptionError, match="unknown argument"):
        from_json(Sample, {"name": "x", "colour": "red"})
    with pytest.raises(OptionError, match="missing required argument"):
        from_json(Sample, {})
    schema = json_schema(Sample)
    assert schema["required"] == ["name"] and schema["properties"]["n"] == {
        "type": "integer", "minimum": 1, "default": 3, "description": "How many."}
    assert schema["properties"]["files"]["items"] == {"type": "string", "format": "path"}


def _command(path: tuple[str, ...]):
    _register()
    cmd = cli
    for word in path:
        cmd = cmd.commands[word]
    return cmd


@pytest.mark.parametrize("tool", sorted(COMMANDS))
def test_the_cli_and_the_tool_come_from_one_declaration(tool):
    t = REGISTRY[tool]
    cmd = _command(COMMANDS[tool])
    cli_names = {p.name for p in cmd.params} - {"as_json", "quiet", "help", "all_opcodes", "sources"}
    declared = {p.name for p in offered(t.options, "cli", tool)}
    assert declared - {"sources"} <= cli_names, declared - cli_names
    tool_only = {p.name for p in offered(t.options, "tool", tool)} - declared
    cli_only = declared - set(t.parameters["properties"])
    assert not tool_only and cli_only <= {"sandbox", "api_key"}, (tool_only, cli_only)
    if not t.agents:                                   # the CLI's only: never offered to a confined caller
        from kernelpilot.tools import ToolArgumentError, ToolContext

        with pytest.raises(ToolArgumentError, match="no tool named"):
            call(tool, {}, ToolContext(confined=True))
    by_name = {p.name: p for p in cmd.params}
    for p in offered(t.options, "tool", tool):
        spec = t.parameters["properties"][p.name]
        c = by_name.get(p.name)
        if c is None:
            continue
        help_text = getattr(c, "help", None)
        if help_text is not None:                      # options carry the help; arguments are listed in the text
            assert help_text.startswith(spec["description"]), (p.name, help_text)
        else:
            assert spec["description"] in " ".join(cmd.help.split())
        if "default" in spec:
            assert f"[default: {spec['default']}]" in help_text
        if "enum" in spec:
            assert list(c.type.choices) == spec["enum"]


def test_no_option_is_declared_twice():
    """Every option's help text is written in one declaration: options several operations take come from one
    function (the run store, the worker timeout, the problem, the target, a run's id)."""
    import ast
    from collections import defaultdict

    where = defaultdict(list)
    for f in sorted((ROOT / "src" / "kernelpilot").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "param" and node.args:
                try:
                    text = ast.literal_eval(node.args[0])
                except ValueError:
                    continue                              # built from values: not a copied string
                where[text].append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert len(where) > 100                               # the declarations were found
    twice = {text[:60]: places for text, places in where.items() if len(places) > 1}
    assert not twice, twice


def test_check_and_bench_offer_only_what_they_take():
    check, bench = REGISTRY["check"].parameters["properties"], REGISTRY["bench"].parameters["properties"]
    assert "seeds" in check and "baselines" not in check and "budget" not in check
    assert "baselines" in bench and "budget" in bench and "seeds" not in bench
    assert "sandbox" not in check and "pool" not in check      # not a tool's to turn off; runtime state
    assert set(REGISTRY["eval"].parameters["properties"]) == set(check) | set(bench)
    assert {p.name for p in params(EvalOptions)} >= {"seeds", "baselines", "sandbox"}


def _kp(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kernelpilot", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=600, cwd=cwd)


@dataclass(frozen=True, kw_only=True)
class Switches(Options):
    on: bool = param("On unless turned off.", True)
    off: bool = param("Off unless turned on.", False)
    auto: bool | None = param("Decided later where not given.")


@pytest.mark.parametrize("cls,operation", [(Switches, None), *((REGISTRY[t].options, t) for t in sorted(COMMANDS))])
def test_an_option_not_given_keeps_the_class_default(cls, operation):
    """What click passes for a flag that was not given leaves the class's default in place: an on/off pair
    (``--sandbox/--no-sandbox``) must not arrive as False."""
    import click

    from kernelpilot.cli.spec import click_params, options_from_cli

    optional = [c for c in click_params(cls, operation) if isinstance(c, click.Option) and not c.required]
    given = click.Command("probe", params=optional).make_context("probe", []).params   # an empty command line
    declared = {p.name: p for p in offered(cls, "cli", operation)}
    for name, value in given.items():              # None and () leave the class's default to options_from_cli
        assert value in (None, ()) or value == declared[name].default, (name, value)
    if cls is Switches:
        assert set(given) == {"on", "off", "auto"}
        opts = options_from_cli(cls, operation, given)
        assert (opts.on, opts.off, opts.auto) == (True, False, None)


def test_the_sandbox_is_on_unless_turned_off(tmp_path):
    require_module("triton")
    from kernelpilot.evaluate.landlock import abi_version

    row = EXAMPLES / "problems" / "row_softmax"
    args = ("check", row, "-c", row / "candidates" / "triton_softmax.py", "--device", "cpu", "--seeds", "1",
            "--case", "rows=64,cols=128,dtype=float32", "--json")
    off = _kp(*args, "--no-sandbox")
    d = json.loads(off.stdout)
    assert off.returncode == 0 and any("sandbox" in n and "turned off" in n for n in d["notes"]), d["notes"]
    default = _kp(*args)
    d = json.loads(default.stdout)
    assert default.returncode == 0 and not any("turned off" in n for n in d["notes"]), d["notes"]
    if abi_version() > 0 or os.environ.get("CI") == "true":    # CI's machines have Landlock: it must be used
        assert not any("not sandboxed" in n for n in d["notes"]), d["notes"]


def test_quiet_prints_nothing_and_json_progress_goes_to_stderr(tmp_path):
    require_module("triton")
    row = EXAMPLES / "problems" / "row_softmax"
    args = ["check", row, "-c", row / "candidates" / "triton_softmax.py", "--device", "cpu", "--seeds", "1",
            "--case", "rows=64,cols=128,dtype=float32"]
    q = _kp(*args, "-q")
    assert q.returncode == 0 and q.stdout == "" and q.stderr == ""
    j = _kp(*args, "--json")
    events = [json.loads(line) for line in j.stderr.splitlines()]
    stages = [e["stage"] for e in events]
    assert stages[0] == "candidate" and "reference" in stages and stages.count("case") == 1, stages
    assert json.loads(j.stdout)["passed"] is True
    human = _kp(*args)                                 # not a terminal: the result only, no progress lines
    assert human.returncode == 0 and human.stderr == "" and "PASSED" in human.stdout


def test_list_commands_refuse_what_only_show_takes():
    """A list command beside its show command takes none of show's options: given, they are usage errors."""
    for args, needle in ((["runs", "list", "7"], "unexpected extra argument"), (["runs", "list", "--code"], "--code"),
                         (["runs", "list", "--trace"], "--trace"), (["arch", "list", "h200"], "unexpected extra argument")):
        r = _kp(*args)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    r = _kp("arch", "list", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["gpus"]


def test_results_match_their_declared_output_schema(tmp_path):
    jsonschema = require_module("jsonschema")
    hip = str(EXAMPLES / "kernels" / "wave_argmax_dpp.hip")
    for name, args in (("arch_info", {}), ("arch_info", {"name": "gfx942"}),
                       ("isa_analyze", {"sources": [hip], "arch": "gfx942"}),
                       ("isa_diff", {"a": hip, "b": str(EXAMPLES / "kernels" / "wave_argmax_bpermute.hip"),
                                     "arch": "gfx942"}),
                       ("docs_search", {"query": "row_bcast", "limit": 2}),
                       ("write_candidate", {"path": str(tmp_path / "x.py"), "text": "x = 1\n"}),
                       ("read_candidate", {"path": str(tmp_path / "x.py")})):
        from kernelpilot.tools import ToolContext

        jsonschema.validate(call(name, args, ToolContext(workspace=tmp_path if "candidate" in name else Path.cwd())),
                            REGISTRY[name].output)
    hit = call("docs_search", {"query": "row_bcast", "limit": 1})["hits"][0]
    jsonschema.validate(call("docs_show", {"citation": hit["citation"]}), REGISTRY["docs_show"].output)
