"""`kernelbridge serve --help` and docs/reference/configuration.md, both
generated from the daemon's one table of flags: the page is exactly what
`kernelbridge serve --flags-markdown` prints, and its table has every flag
of --help with the same variable and default, so that neither drifts from
the code."""
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("KB_BINARY", str(ROOT / "build" / "kernelbridge"))
CONFIGURATION = ROOT / "docs" / "reference" / "configuration.md"
ENTRY = re.compile(r"^--(?P<flag>[a-z0-9-]+)(?: (?P<arg>\S+))?\n(?P<help>.*)"
                   r"\[(?P<env>KB_[A-Z0-9_]+)(?P<switch>=1)?(?:, default (?P<default>.*))?\]$")


def words(text):
    return " ".join(text.split())


def help_flags():
    """{flag: (arg, env, default)} from --help, each entry's lines joined."""
    out = subprocess.run([BINARY, "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    entries, current = [], None
    for line in out.stdout.splitlines():
        if line.startswith("  --"):
            current = [line]
            entries.append(current)
        elif current is not None and line.startswith("    "):
            current.append(line)
        else:
            current = None
    flags = {}
    for entry in entries:
        head, _, rest = entry[0].strip().partition("  ")
        m = ENTRY.match(head + "\n" + words(" ".join([rest] + entry[1:])))
        assert m, entry
        flags[m["flag"]] = (m["arg"] or "", m["env"] + (m["switch"] or ""),
                            words(m["default"] or ""))
    return flags


def unescape(cell):
    """A cell's text as read: Markdown escapes and entities undone."""
    cell = re.sub(r"\\([|*_\[\]])", r"\1", cell)
    return cell.replace("&lt;", "<").replace("&gt;", ">").replace("`", "").strip()


def page_flags():
    """{flag: (arg, env, default)} from the configuration page's table."""
    flags = {}
    for line in CONFIGURATION.read_text().splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [unescape(c) for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        assert len(cells) == 4, line
        flag, env, default = cells[:3]
        name, _, arg = flag[2:].partition(" ")
        flags[name] = (arg, env, "" if default == "-" else words(default))
    return flags


def test_configuration_page_is_the_flag_tables_output():
    out = subprocess.run([BINARY, "serve", "--flags-markdown"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("<!-- Generated"), out.stdout[:200]
    assert CONFIGURATION.read_text() == out.stdout, (
        "docs/reference/configuration.md is stale: regenerate it with "
        "`kernelbridge serve --flags-markdown > docs/reference/configuration.md`")


def test_help_lists_every_flag_with_its_variable():
    flags = help_flags()
    assert len(flags) >= 38, sorted(flags)
    for name in ("listen", "pool", "insecure", "max-connections-per-address", "port-file"):
        assert name in flags, name
    envs = [env for _, env, _ in flags.values()]
    assert len(envs) == len(set(envs)), envs


def test_configuration_table_matches_help():
    in_help, in_page = help_flags(), page_flags()
    assert sorted(in_page) == sorted(in_help), (
        "only in --help: %s; only on the page: %s"
        % (sorted(set(in_help) - set(in_page)), sorted(set(in_page) - set(in_help))))
    for name, (arg, env, default) in in_help.items():
        assert in_page[name] == (arg, env, default), (name, in_page[name], in_help[name])


def test_defaults_in_code_are_values_the_flag_takes():
    # The page writes a default the daemon applies as a value in code style
    # (`16M`), a described one in words (none, off): each of the former
    # must parse as the flag's own value.
    values = {}
    for line in CONFIGURATION.read_text().splitlines():
        m = re.match(r"\| `--([a-z0-9-]+)`[^|]*(?:\\\|[^|]*)*\| `[A-Z0-9_=]+` \| `([^`]+)` \|", line)
        if m:
            values[m[1]] = m[2]
    assert {"listen", "pool", "max-body", "sse-keepalive"} <= set(values), values
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    for name, value in values.items():
        done = subprocess.run([BINARY, "serve", "--%s" % name, value, "--help"],
                              capture_output=True, text=True, env=env, timeout=30)
        assert done.returncode == 0, (name, value, done.stderr)


def test_each_variable_is_read_as_its_flag():
    # A bad value in the variable --help names is refused under the flag's
    # name: the variable is the one the daemon reads, for the flag it says.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    checked = 0
    for name, (arg, variable, _) in help_flags().items():
        if arg not in ("S", "N", "BYTES", "HOST:PORT", "ipc|tcp", "text|json", "A-B"):
            continue
        done = subprocess.run([BINARY, "serve", "--help"], capture_output=True, text=True,
                              env=dict(env, **{variable: "bogus"}), timeout=30)
        assert done.returncode == 2, (variable, done.stdout[:200])
        assert "--%s: bad value 'bogus'" % name in done.stderr, (variable, done.stderr)
        checked += 1
    assert checked >= 24, checked
