#!/usr/bin/env python3
"""Writes coffer(1), a roff manual page, from the command definitions.

    coffer --experimental-dump-help | scripts/man-page.py [--date YYYY-MM-DD] > coffer.1

swift-argument-parser dumps every command, option and help text as JSON
(`--experimental-dump-help`, the input of its own `generate-manual` plugin); this turns it into one
page: the global options, then a section per command, subcommands included. The plugin would build
every product of the package again in its own configuration (and without the package's traits),
so `make install` uses this instead; the page says exactly what `coffer --help` says.
"""
import datetime
import json
import sys


def roff(text):
    """Text safe in a roff paragraph: backslashes escaped, no line starting with a control dot."""
    out = []
    for line in (text or "").replace("\\", "\\e").split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        # Non-ASCII as groff's Unicode escapes, so the page needs no input encoding.
        out.append("".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in line))
    return "\n".join(out)


def flag_names(argument):
    names = []
    for name in argument.get("names", []):
        names.append(("-" if name["kind"] == "short" else "--") + name["name"])
    return names


def usage_of(argument):
    value = argument.get("valueName", "value")
    kind = argument["kind"]
    if kind == "positional":
        text = "<%s>" % value
    elif kind == "flag":
        text = flag_names(argument)[0] if flag_names(argument) else ""
    else:
        names = flag_names(argument)
        text = "%s <%s>" % (names[0] if names else "", value)
    if argument.get("isRepeating"):
        text += " ..."
    if argument.get("isOptional"):
        text = "[%s]" % text
    return text


def shown(argument):
    if not argument.get("shouldDisplay", True):
        return False
    names = flag_names(argument)
    return not (set(names) & {"-h", "--help", "--version"})


def describe_arguments(arguments, out):
    for argument in arguments:
        if not shown(argument):
            continue
        out.append(".TP")
        if argument["kind"] == "positional":
            out.append("\\fI%s\\fR" % roff(argument.get("valueName", "")))
        else:
            label = ", ".join("\\fB%s\\fR" % roff(n) for n in flag_names(argument))
            if argument["kind"] == "option":
                label += " \\fI%s\\fR" % roff(argument.get("valueName", "value"))
            out.append(label)
        text = argument.get("abstract", "")
        if argument.get("discussion"):
            text += "\n" + argument["discussion"] if isinstance(argument["discussion"], str) else ""
        if argument.get("defaultValue") not in (None, ""):
            text += " (default: %s)" % argument["defaultValue"]
        out.append(roff(text.strip()) or "\\&")


def paragraph(text, out):
    """One paragraph; one whose lines are indented (examples) keeps its lines as they are."""
    out.append(".PP")
    lines = text.split("\n")
    if any(line.startswith("  ") for line in lines[1:]) or text.startswith("  "):
        out.append(".nf")
        out.append(roff(text))
        out.append(".fi")
    else:
        out.append(roff(text))


def discussion_text(command):
    discussion = command.get("discussion")
    if isinstance(discussion, str):
        return discussion
    return ""


def commands(command, path):
    """Every displayed command below `command`, depth first, with its full name."""
    for sub in command.get("subcommands", []):
        if not sub.get("shouldDisplay", True) or sub["commandName"] == "help":
            continue
        full = path + [sub["commandName"]]
        yield full, sub
        yield from commands(sub, full)


# Run under these names (links `make install` makes), coffer speaks git's and docker's
# credential-helper protocols (Sources/coffer/Credential*.swift; their --help says more).
CREDENTIAL_HELPERS = """\
git-credential-coffer keeps git's HTTPS passwords and tokens in the vault. Set it up once:

  git config --global credential.helper coffer

Each is the item git:PROTOCOL://HOST[/PATH] (the path with credential.useHttpPath), account the \
user name, shown by coffer list. docker-credential-coffer keeps registry logins (items \
docker:SERVER-URL). Set it up once, in ~/.docker/config.json:

  { "credsStore": "coffer" }

Both unlock as every command does: a key kept by coffer unlock, --key-file, --identity or \
$COFFER_IDENTITY, a passphrase file or variable, else a prompt on the terminal. Without any of \
these and without a terminal, a get answers nothing at once (git then asks the user; docker goes \
on without a login) and store and erase change nothing. See git-credential-coffer --help and \
docker-credential-coffer --help."""


def main():
    date = datetime.date.today().isoformat()
    if len(sys.argv) == 3 and sys.argv[1] == "--date":
        date = sys.argv[2]
    root = json.load(sys.stdin)["command"]
    name = root["commandName"]
    out = ['.\\" Generated by scripts/man-page.py from `%s --experimental-dump-help`; do not edit.' % name]
    out.append('.TH %s 1 "%s" "%s" "User Commands"' % (name.upper(), date, name))
    out.append(".SH NAME")
    out.append("%s \\- %s" % (name, roff(root.get("abstract", ""))))
    out.append(".SH SYNOPSIS")
    out.append("\\fB%s\\fR [\\fIglobal options\\fR] \\fIcommand\\fR [\\fIarguments\\fR]" % name)
    if discussion_text(root):
        out.append(".SH DESCRIPTION")
        for text in discussion_text(root).split("\n\n"):
            paragraph(text, out)
    out.append(".SH GLOBAL OPTIONS")
    describe_arguments(root.get("arguments", []), out)
    out.append(".SH COMMANDS")
    for full, command in commands(root, [name]):
        synopsis = " ".join([" ".join(full)] + [usage_of(a) for a in command.get("arguments", []) if shown(a)])
        out.append(".SS \"%s\"" % roff(" ".join(full)).replace('"', '\\(dq'))
        out.append(".B %s" % roff(synopsis).replace('"', '\\(dq'))
        out.append(".PP")
        out.append(roff(command.get("abstract", "")) or "\\&")
        for text in discussion_text(command).split("\n\n"):
            if text.strip():
                paragraph(text, out)
        if any(shown(a) for a in command.get("arguments", [])):
            out.append(".PP")
            out.append("Arguments and options:")
            out.append(".RS")
            describe_arguments(command.get("arguments", []), out)
            out.append(".RE")
    out.append(".SH CREDENTIAL HELPERS")
    for text in CREDENTIAL_HELPERS.split("\n\n"):
        paragraph(text, out)
    out.append(".SH SEE ALSO")
    out.append("The README and SECURITY.md of Coffer; \\fB%s help\\fR \\fIcommand\\fR." % name)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
