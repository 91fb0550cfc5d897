"""What a shareable trace must not hold, as rules over plain strings.

The format modules (``profkit.scrub.nsys``,
``profkit.scrub.kineto``) find the places of their format and pass
every string through one ``Redactor``; the rules live here so that both
formats apply the same ones:

- an environment block (``NAME=VALUE`` strings separated by NUL bytes, as a
  process's ``environ``) loses its entries;
- the values of secret-looking variables of the recorded environment
  (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*_KEY``, ...) are replaced
  wherever else they occur (a command line, an NVTX text);
- strings shaped like well-known credentials (GitHub, GitLab, Slack, AWS,
  Hugging Face, OpenAI tokens, ``scheme://user:password@host``) are replaced
  even when no environment names them;
- with ``anonymize``, user names, host names and home folders become
  ``user1``, ``host1``, ``/home/user1``: the same input always gives the same
  token within one file, so paths still line up with each other.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

REDACTED = "[redacted]"
ENV_REMOVED = "[environment removed]"

# A process environment entry: NAME=VALUE with a shell-variable name.
_ENV_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# Variables whose values are credentials, by a word of their name
# (HF_TOKEN, AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY, NPM_AUTHTOKEN, DB_PASSWORD).
# PWD/OLDPWD are folders, not passwords.
_SECRET_WORDS = {"TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "KEY",
                 "APIKEY", "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "SIGNATURE", "PAT", "SAS",
                 "DSN", "WEBHOOK", "PRIVATE"}
_SECRET_SUFFIXES = ("AUTHTOKEN", "ACCESSTOKEN", "APIKEY", "SECRETKEY", "PASSWORD")
# Credentials recognisable by their shape alone.
_TOKEN_SHAPES = re.compile(
    r"(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|hf_[A-Za-z0-9]{30,}"
    r"|sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[^\x00]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$))"
)
# scheme://user:password@host (or redis://:password@host, no user): keep the scheme
# and host, drop the credentials.
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s:@\x00]*:[^/\s@\x00]+@")
# NAME=value, --name=value and ?name=value&... (a query parameter).  Each pattern
# starts only where a name starts (the lookbehind) and takes the name possessively,
# so it is linear in the string's length; the value is redacted where the name is
# secret-looking (is_secret_name: AWS_SECRET_ACCESS_KEY, --aws-secret, token, key).
_ASSIGNMENT = re.compile(r"(?<![\w.-])(-{0,2})([A-Za-z_][\w.-]*+)=(\"[^\"\x00]*\"|'[^'\x00]*'|[^\s\"'&;,\x00]+)")
# --name value (a space, or a NUL in an argv block, between them).
_OPTION_VALUE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*+)([ \t]+|\x00)(?![-\s])([^\s\"'\x00]+)")
# -pVALUE: the password of mysql, mysqldump, psql-style clients (compiler flags kept).
_SHORT_PASSWORD = re.compile(r"(?<![\w-])-p(?!thread\b|ipe\b|ie\b|g\b)([^\s\x00\"'=]{4,})")
# Shortest value treated as a secret: shorter ones ("1", "yes") are not
# secrets and would wreck unrelated names if replaced everywhere.
MIN_SECRET_LENGTH = 6
# Shortest value of any recorded variable, whatever its name (MYSQL_PWD, CI_JOB_JWT),
# that is replaced wherever it occurs.
MIN_ENV_VALUE_LENGTH = 8
# Variables whose values are the user's identity, not secrets: --anonymize replaces
# them (user1, host1, /home/user1); replacing them as secrets would hide the paths.
IDENTITY_VARIABLES = {"USER", "LOGNAME", "USERNAME", "SUDO_USER", "HOSTNAME", "HOST", "COMPUTERNAME", "HOME",
                      "PWD", "OLDPWD"}
# Values too common to be anyone's secret: paths and path lists, numbers and versions,
# locales, booleans and a few words every environment holds.
_COMMON_VALUE = re.compile(
    r"[/~.][^\s]*|[\d.,:;_ +-]+|[A-Za-z]{1,3}(?:_[A-Za-z]{2})?\.(?:utf-?8|UTF-?8)(?:@\w+)?"
    r"|(?i:true|false|yes|no|none|null|localhost|unlimited|disabled|enabled|default|"
    r"xterm-256color|screen-256color|tmux-256color|truecolor|x86_64-pc-linux-gnu|expandable_segments:true)")
# Shortest user or host name replaced as a word outside its own fields.
MIN_NAME_LENGTH = 3
# Names too common to be identifying (replacing "root" everywhere helps nobody).
_COMMON_NAMES = {"root", "user", "admin", "ubuntu", "localhost", "runner", "nobody"}


def is_environment_entry(part: str) -> bool:
    return bool(_ENV_ENTRY.match(part))


def has_environment_block(text: str) -> bool:
    """Whether ``text`` holds NUL-separated ``NAME=VALUE`` entries (an ``environ`` block)."""
    return "\x00" in text and any(is_environment_entry(p) for p in text.split("\x00"))


def parse_environment(text: str, separator: str) -> dict[str, str]:
    """``NAME=VALUE`` entries of a block split on ``separator`` (NUL, ';' or newline)."""
    env: dict[str, str] = {}
    for part in text.split(separator):
        if is_environment_entry(part):
            name, _, value = part.partition("=")
            env[name] = _unquote(value)
    return env


def _unquote(value: str) -> str:
    # META_DATA_CAPTURE stores NAME="value".
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def is_secret_name(name: str) -> bool:
    words = name.upper().split("_")
    if words[-1] == "ID":
        # an identifier (NSYS_PROFILING_SESSION_ID=101372): replacing it in every
        # string would mangle unrelated numbers
        return False
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in words)


def is_secret_option(name: str) -> bool:
    """``--aws-secret``, ``--password``, ``api.key``: a secret-looking name in option spelling."""
    return is_secret_name(name.lstrip("-").replace("-", "_").replace(".", "_"))


def is_common_value(value: str) -> bool:
    return _COMMON_VALUE.fullmatch(value) is not None


def secret_values(env: Mapping[str, str]) -> set[str]:
    """The values of ``env`` that go wherever they occur: credentials (by the variable's
    name or the value's shape), and every other value of at least MIN_ENV_VALUE_LENGTH
    characters that is not a common path or word, whatever the variable is called
    (MYSQL_PWD, CI_JOB_JWT hold secrets under names that do not say so)."""
    found = set()
    for name, value in env.items():
        value = value.strip()
        if len(value) < MIN_SECRET_LENGTH:
            continue
        if _TOKEN_SHAPES.fullmatch(value) or (is_secret_name(name) and not value.startswith("/")):
            # A variable such as TOKEN_FILE=/run/secrets/x names a file, not a secret.
            found.add(value)
        elif (len(value) >= MIN_ENV_VALUE_LENGTH and name.upper() not in IDENTITY_VARIABLES
              and not is_common_value(value)):
            found.add(value)
    return found


def _secret_value(value: str) -> bool:
    """Whether a value named secret is worth replacing: not a path, a number or a few characters."""
    bare = value.strip("\"'")
    return len(bare) >= MIN_SECRET_LENGTH and not bare.startswith("/") and not bare.isdigit()


class Anonymizer:
    """Replaces user names, host names and home folders with stable tokens."""

    def __init__(self) -> None:
        self.users: dict[str, str] = {}
        self.hosts: dict[str, str] = {}
        self.homes: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None

    def add_user(self, name: str) -> None:
        name = name.strip()
        if name and name not in self.users:
            self.users[name] = f"user{len(self.users) + 1}"
            self._pattern = None

    def add_host(self, name: str) -> None:
        name = name.strip()
        if name and name not in self.hosts:
            self.hosts[name] = f"host{len(self.hosts) + 1}"
            self._pattern = None
            short = name.split(".")[0]
            if short != name:
                self.add_host(short)

    def add_home(self, path: str) -> None:
        path = path.rstrip("/")
        if path.count("/") < 1 or path in self.homes:
            return
        owner = path.rsplit("/", 1)[1]
        self.add_user(owner)
        self.homes[path] = f"/home/{self.users.get(owner, 'user')}"
        self._pattern = None

    def learn(self, env: Mapping[str, str]) -> None:
        """Take user, host and home from an environment (USER, LOGNAME, HOSTNAME, HOME)."""
        for key in ("USER", "LOGNAME", "USERNAME", "SUDO_USER"):
            if env.get(key):
                self.add_user(env[key])
        for key in ("HOSTNAME", "HOST", "COMPUTERNAME"):
            if env.get(key):
                self.add_host(env[key])
        if env.get("HOME"):
            self.add_home(env["HOME"])

    def _compiled(self) -> re.Pattern[str]:
        if self._pattern is None:
            alternatives = [r"(?P<homedir>(?:/home|/Users)/(?P<owner>[^/\s\x00:;\"'=]+))"]
            homes = sorted(self.homes, key=len, reverse=True)
            if homes:
                alternatives.append(
                    r"(?P<home>(?:%s))(?=[/\s\x00:;\"'=]|$)" % "|".join(map(re.escape, homes)))
            words = [w for w in [*self.users, *self.hosts]
                     if len(w) >= MIN_NAME_LENGTH and w.lower() not in _COMMON_NAMES]
            if words:
                alternatives.append(r"(?<![A-Za-z0-9_])(?P<word>%s)(?![A-Za-z0-9_])"
                                    % "|".join(map(re.escape, sorted(words, key=len, reverse=True))))
            self._pattern = re.compile("|".join(alternatives))
        return self._pattern

    def __call__(self, text: str) -> str:
        return self._compiled().sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        if match.group("homedir"):
            owner = match.group("owner")
            self.add_user(owner)
            return match.group("homedir")[: -len(owner)] + self.users[owner]
        if match.groupdict().get("home"):
            return self.homes[match.group("home")]
        word = match.group("word")
        return self.users.get(word) or self.hosts[word]

    def user_token(self, name: str) -> str:
        self.add_user(name)
        return self.users[name.strip()] if name.strip() else name

    def host_token(self, name: str) -> str:
        self.add_host(name)
        return self.hosts[name.strip()] if name.strip() else name


class Redactor:
    """Applies every rule to one string at a time and counts what it changed."""

    @classmethod
    def for_environments(cls, environments: Iterable[Mapping[str, str]], anonymize: bool) -> Redactor:
        """The redactor of a trace's recorded environments: their secret values, and with
        ``anonymize`` an anonymizer that learned their user and host names (``.anonymizer``)."""
        anonymizer = Anonymizer() if anonymize else None
        secrets: set[str] = set()
        for env in environments:
            secrets |= secret_values(env)
            if anonymizer is not None:
                anonymizer.learn(env)
        return cls(secrets, anonymizer)

    def __init__(self, secrets: Iterable[str] = (), anonymizer: Anonymizer | None = None) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        self._secret_pattern = re.compile("|".join(map(re.escape, self.secrets))) if self.secrets else None
        self.anonymizer = anonymizer
        self.counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        out = text
        if "\x00" in out and has_environment_block(out):
            kept = [p for p in out.split("\x00") if p and not is_environment_entry(p)]
            out = "\x00".join(kept) if kept else ENV_REMOVED
            self.counts["environment blocks"] += 1
        if self._secret_pattern is not None:
            out, n = self._secret_pattern.subn(REDACTED, out)
            self.counts["secret values"] += n
        out, n = _TOKEN_SHAPES.subn(REDACTED, out)
        self.counts["credential-shaped strings"] += n
        out, n = _URL_CREDENTIALS.subn(REDACTED + "@", out)
        self.counts["URL credentials"] += n
        if "=" in out:
            out = _ASSIGNMENT.sub(self._assignment, out)
        if "-" in out:
            out = _OPTION_VALUE.sub(self._option_value, out)
            out, n = _SHORT_PASSWORD.subn("-p" + REDACTED, out)
            self.counts["-pPASSWORD options"] += n
        if self.anonymizer is not None:
            anonymized = self.anonymizer(out)
            if anonymized != out:
                self.counts["anonymized strings"] += 1
            out = anonymized
        return out

    def _assignment(self, match: re.Match[str]) -> str:
        dashes, name, value = match.groups()
        if not (is_secret_option(name) and _secret_value(value)) or value == REDACTED:
            return match.group(0)
        self.counts["--name=value options" if dashes else "NAME=value assignments and query parameters"] += 1
        return f"{dashes}{name}={REDACTED}"

    def _option_value(self, match: re.Match[str]) -> str:
        option, space, value = match.groups()
        if not (is_secret_option(option) and _secret_value(value)) or value == REDACTED:
            return match.group(0)
        self.counts["--name value options"] += 1
        return f"{option}{space}{REDACTED}"

    def redact_pair(self, option: str, value: str) -> str:
        """The value of an argument that follows ``option`` as a separate string (argv rows)."""
        if option.startswith("-") and "=" not in option and is_secret_option(option) and _secret_value(value):
            self.counts["--name value options"] += 1
            return REDACTED
        return value

    def redact_member(self, key: str, value: str) -> str:
        """A JSON member whose key is secret-looking (``{"AWS_SECRET_ACCESS_KEY": "..."}``)."""
        if is_secret_option(key) and _secret_value(value):
            self.counts["secret-named members"] += 1
            return REDACTED
        return value

    def summary(self) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if v}
