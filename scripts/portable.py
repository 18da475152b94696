#!/usr/bin/env python3
"""scripts/portable.py: assemble the portable edition (doc/portable.md).

The C edition's scripts in sql/ are the one source of the schema.  Every
statement there that binds a C symbol,

    CREATE FUNCTION idempotency.f(...) RETURNS ... AS 'MODULE_PATHNAME',
    '<symbol>' LANGUAGE C ...;

is replaced by the portable body of that symbol: a CREATE FUNCTION in SQL or
PL/pgSQL kept in sql/portable/<concern>.sql under a marker line

    -- portable: <symbol>

The portable statement must declare the same function as the C one: name,
argument names, types and defaults, return type, volatility, strictness,
parallel safety, leakproofness and ROWS (its language, SECURITY and SET
clauses and COST may differ).  A symbol without a portable body, a body
whose header differs, or a body that no script uses is an error.

    portable.py build [--out DIR] [--allow-missing]
        writes DIR (default build/portable):
          idempotency--<v>.sql       plain-SQL install of version v (psql -f)
          idempotency--<a>--<b>.sql  plain-SQL update from a to b
          idempotency-tle.sql        pg_tle installer: install_extension of
                                     1.0, install_update_path of each update
        --allow-missing gives a symbol without a portable body a stub that
        raises 0A000, for work in progress only.
    portable.py scratch --schema S CONCERN...
        prints the portable bodies of sql/portable/<CONCERN>.sql with the
        functions they define renamed into schema S (calls among them too),
        to compare them with the C edition in one database
        (test/portable/compare_hashes.sql).
    portable.py check
        checks every portable body against the scripts; writes nothing.

Python 3 standard library only.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = 'idempotency'
SCHEMA = 'idempotency'
FIRST_VERSION = '1.0'
# The dollar quote of the pg_tle installer; pg_tle itself forbids these two.
TLE_QUOTE = '$_idempotency_tle_$'
TLE_FORBIDDEN = ('$_pgtle_o_$', '$_pgtle_i_$')

MARKER = re.compile(r'^--\s*portable:\s*(\S+)\s*$')
HELPER_MARKER = re.compile(r'^--\s*portable helper:\s*since\s+(\S+)\s*$')


class BuildError(Exception):
    pass


# --------------------------------------------------------------------------
# Lexing: enough of PostgreSQL's lexer (and psql's) to split scripts into
# statements and to read function headers.
# --------------------------------------------------------------------------

class Token:
    __slots__ = ('kind', 'text', 'start', 'end')

    def __init__(self, kind, text, start, end):
        self.kind = kind      # ws comment meta ident qident string dollar
        self.text = text      # number param op punct
        self.start = start
        self.end = end

    def word(self):
        """The token as a keyword or unquoted identifier, lower case."""
        return self.text.lower() if self.kind == 'ident' else None

    def __repr__(self):
        return '%s(%r)' % (self.kind, self.text)


IDENT_START = re.compile(r'[A-Za-z_\u0080-\U0010ffff]')
IDENT_REST = re.compile(r'[A-Za-z0-9_$\u0080-\U0010ffff]*')
DOLLAR_TAG = re.compile(r'\$([A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_\u0080-\U0010ffff]*)?\$')
NUMBER = re.compile(r'(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?')
OP_CHARS = '+-*/<>=~!@#%^&|`?:'


def lex(sql, where):
    """Tokens of sql; "where" names it in errors."""
    out = []
    i = 0
    n = len(sql)
    line_start = True
    while i < n:
        c = sql[i]
        start = i
        if c in ' \t\r\n\f':
            while i < n and sql[i] in ' \t\r\n\f':
                if sql[i] == '\n':
                    line_start = True
                i += 1
            out.append(Token('ws', sql[start:i], start, i))
            continue
        at_line_start = line_start
        line_start = False
        if c == '\\' and at_line_start:
            # a psql meta-command (\echo ... \quit): to the end of the line
            j = sql.find('\n', i)
            i = n if j < 0 else j
            out.append(Token('meta', sql[start:i], start, i))
        elif sql.startswith('--', i):
            j = sql.find('\n', i)
            i = n if j < 0 else j
            out.append(Token('comment', sql[start:i], start, i))
        elif sql.startswith('/*', i):
            depth = 0
            while i < n:
                if sql.startswith('/*', i):
                    depth += 1
                    i += 2
                elif sql.startswith('*/', i):
                    depth -= 1
                    i += 2
                    if depth == 0:
                        break
                else:
                    i += 1
            if depth:
                raise BuildError('%s: unterminated /* comment' % where)
            out.append(Token('comment', sql[start:i], start, i))
        elif c == "'" or (c in 'eE' and sql.startswith("'", i + 1)):
            backslash = c != "'"
            i += 1 if c == "'" else 2
            while True:
                if i >= n:
                    raise BuildError('%s: unterminated string at offset %d' % (where, start))
                if backslash and sql[i] == '\\':
                    i += 2
                elif sql[i] == "'":
                    if sql.startswith("''", i):
                        i += 2
                    else:
                        i += 1
                        break
                else:
                    i += 1
            out.append(Token('string', sql[start:i], start, i))
        elif c == '"':
            i += 1
            while True:
                j = sql.find('"', i)
                if j < 0:
                    raise BuildError('%s: unterminated quoted identifier' % where)
                if sql.startswith('""', j):
                    i = j + 2
                else:
                    i = j + 1
                    break
            out.append(Token('qident', sql[start:i], start, i))
        elif c == '$' and i + 1 < n and sql[i + 1].isdigit():
            m = re.compile(r'\$\d+').match(sql, i)
            i = m.end()
            out.append(Token('param', sql[start:i], start, i))
        elif c == '$' and DOLLAR_TAG.match(sql, i):
            tag = DOLLAR_TAG.match(sql, i).group(0)
            j = sql.find(tag, i + len(tag))
            if j < 0:
                raise BuildError('%s: unterminated %s quote' % (where, tag))
            i = j + len(tag)
            out.append(Token('dollar', sql[start:i], start, i))
        elif IDENT_START.match(c):
            i = IDENT_REST.match(sql, i + 1).end()
            out.append(Token('ident', sql[start:i], start, i))
        elif c.isdigit() or (c == '.' and i + 1 < n and sql[i + 1].isdigit()):
            i = NUMBER.match(sql, i).end()
            out.append(Token('number', sql[start:i], start, i))
        elif c in '(),;[].':
            i += 1
            out.append(Token('punct', c, start, i))
        elif c in OP_CHARS:
            while (i < n and sql[i] in OP_CHARS
                   and not sql.startswith('--', i) and not sql.startswith('/*', i)):
                i += 1
            out.append(Token('op', sql[start:i], start, i))
        else:
            raise BuildError('%s: unexpected character %r at offset %d' % (where, c, i))
    return out


class Statement:
    """One statement: its significant tokens and its place in the script."""

    def __init__(self, sql, tokens):
        self.sql = sql
        self.tokens = [t for t in tokens if t.kind not in ('ws', 'comment')]
        self.start = self.tokens[0].start
        self.end = self.tokens[-1].end

    @property
    def text(self):
        return self.sql[self.start:self.end]

    def words(self, count):
        return [t.word() for t in self.tokens[:count]]


def split_statements(sql, where):
    """The statements of a script; psql meta-commands are statements too."""
    statements = []
    current = []
    for tok in lex(sql, where):
        if tok.kind == 'meta':
            if any(t.kind not in ('ws', 'comment') for t in current):
                raise BuildError('%s: psql command inside a statement: %s' % (where, tok.text))
            statements.append(Statement(sql, [tok]))
            current = []
            continue
        current.append(tok)
        if tok.kind == 'punct' and tok.text == ';':
            statements.append(Statement(sql, current))
            current = []
    if any(t.kind not in ('ws', 'comment') for t in current):
        raise BuildError('%s: statement without a closing semicolon at the end' % where)
    return statements


# --------------------------------------------------------------------------
# Function headers
# --------------------------------------------------------------------------

# Words that end the RETURNS clause (at parenthesis depth 0).
ATTRIBUTE_WORDS = {
    'language', 'immutable', 'stable', 'volatile', 'strict', 'called',
    'returns', 'security', 'external', 'parallel', 'leakproof', 'not',
    'cost', 'rows', 'support', 'set', 'as', 'window', 'transform', 'return',
}
TYPE_ALIASES = {
    'int': 'integer', 'int4': 'integer', 'int8': 'bigint', 'int2': 'smallint',
    'bool': 'boolean', 'float8': 'double precision', 'float4': 'real',
    'timestamptz': 'timestamp with time zone', 'varchar': 'character varying',
}


def normal_tokens(tokens):
    """Tokens as comparable strings: case, pg_catalog. and aliases ignored."""
    out = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if (t.word() == 'pg_catalog' and i + 1 < len(tokens)
                and tokens[i + 1].text == '.'):
            i += 2
            continue
        if t.kind == 'ident':
            out.append(TYPE_ALIASES.get(t.word(), t.word()))
        elif t.kind == 'qident' and re.fullmatch(r'"[a-z_][a-z0-9_$]*"', t.text):
            out.append(t.text[1:-1])
        else:
            out.append(t.text)
        i += 1
    return out


def join_tokens(words):
    """Normalized tokens as SQL text, for messages."""
    text = ''
    for w in words:
        if text and not (w in (')', ']', ',', '.', '[') or text[-1] in '(.['):
            text += ' '
        text += w
    return text


def split_top_level(tokens, sep=','):
    """Split tokens at "sep" outside parentheses and brackets."""
    parts = [[]]
    depth = 0
    for t in tokens:
        if t.kind == 'punct' and t.text in '([':
            depth += 1
        elif t.kind == 'punct' and t.text in ')]':
            depth -= 1
        if depth == 0 and t.kind == 'punct' and t.text == sep:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts if parts != [[]] else []


class FunctionHeader:
    """What CREATE FUNCTION declares, and where its parts are."""

    def __init__(self, stmt, where):
        toks = stmt.tokens
        self.stmt = stmt
        self.where = where
        i = 1
        self.or_replace = False
        if [t.word() for t in toks[1:3]] == ['or', 'replace']:
            self.or_replace = True
            i = 3
        if toks[i].word() != 'function':
            raise BuildError('%s: not a CREATE FUNCTION statement' % where)
        i += 1
        name = [toks[i]]
        i += 1
        while toks[i].text == '.':
            name += toks[i:i + 2]
            i += 2
        self.name = join_tokens(normal_tokens(name) if len(name) > 1
                                else [SCHEMA, '.'] + normal_tokens(name))
        if toks[i].text != '(':
            raise BuildError('%s: %s: expected "("' % (where, self.name))
        depth = 0
        j = i
        while True:
            if toks[j].text == '(':
                depth += 1
            elif toks[j].text == ')':
                depth -= 1
                if depth == 0:
                    break
            j += 1
        self.args = []
        for arg in split_top_level(toks[i + 1:j]):
            norm = normal_tokens(arg)
            # "name type = expr" is "name type DEFAULT expr"
            depth = 0
            for k, t in enumerate(arg):
                if t.text in ('(', '['):
                    depth += 1
                elif t.text in (')', ']'):
                    depth -= 1
                elif depth == 0 and t.text == '=':
                    norm[k] = 'default'
            self.args.append(join_tokens(norm))
        i = j + 1
        if toks[i].word() != 'returns':
            raise BuildError('%s: %s: expected RETURNS' % (where, self.name))
        j = i + 1
        depth = 0
        while j < len(toks) and not (depth == 0 and toks[j].word() in ATTRIBUTE_WORDS):
            if toks[j].text == '(':
                depth += 1
            elif toks[j].text == ')':
                depth -= 1
            j += 1
        self.returns = join_tokens(normal_tokens(toks[i + 1:j]))
        # the attributes, in any order
        self.language = None
        self.volatility = 'volatile'
        self.strict = False
        self.parallel = 'unsafe'
        self.leakproof = False
        self.rows = None
        self.body = []          # the tokens after AS
        self.language_span = None   # (first, last) token index of LANGUAGE x
        self.as_span = None
        end = len(toks) - 1 if toks[-1].text == ';' else len(toks)
        while j < end:
            w = toks[j].word()
            if w == 'language':
                self.language = toks[j + 1].text.strip("'").lower()
                self.language_span = (j, j + 1)
                j += 2
            elif w in ('immutable', 'stable', 'volatile'):
                self.volatility = w
                j += 1
            elif w == 'strict':
                self.strict = True
                j += 1
            elif w == 'called':         # CALLED ON NULL INPUT
                self.strict = False
                j += 4
            elif w == 'returns':        # RETURNS NULL ON NULL INPUT
                self.strict = True
                j += 5
            elif w == 'external':
                j += 1
            elif w == 'security':
                j += 2
            elif w == 'parallel':
                self.parallel = toks[j + 1].word()
                j += 2
            elif w == 'leakproof':
                self.leakproof = True
                j += 1
            elif w == 'not' and toks[j + 1].word() == 'leakproof':
                j += 2
            elif w in ('cost', 'rows'):
                if w == 'rows':
                    self.rows = toks[j + 1].text
                j += 2
            elif w == 'set':
                # SET name {TO | =} value [, ...] | SET name FROM CURRENT
                j += 2
                if toks[j].word() == 'from':
                    j += 2
                else:
                    j += 1
                    j += 1
                    while j < end and toks[j].text == ',':
                        j += 2
            elif w == 'as':
                k = j + 1
                self.body = [toks[k]]
                if k + 2 < end + 1 and toks[k + 1].text == ',':
                    self.body.append(toks[k + 2])
                    k += 2
                self.as_span = (j, k)
                j = k + 1
            else:
                raise BuildError('%s: %s: cannot read the function attribute %r'
                                 % (where, self.name, toks[j].text))
        if self.language is None:
            raise BuildError('%s: %s: no LANGUAGE' % (where, self.name))

    @property
    def symbol(self):
        """The C symbol of AS 'MODULE_PATHNAME', 'symbol', or None."""
        if (self.language == 'c' and len(self.body) == 2
                and self.body[0].text == "'MODULE_PATHNAME'"):
            return self.body[1].text.strip("'")
        return None

    def signature(self):
        return '%s(%s)' % (self.name, ', '.join(self.args))

    def labels(self):
        return {
            'volatility': self.volatility,
            'strictness': 'strict' if self.strict else 'called on null input',
            'parallel': self.parallel,
            'leakproof': self.leakproof,
            'rows': self.rows,
        }

    def differences(self, other):
        """How "other" (a portable body) declares another function than self."""
        diffs = []
        if self.name != other.name:
            diffs.append('name %s, not %s' % (other.name, self.name))
        if self.args != other.args:
            diffs.append('arguments (%s), not (%s)'
                         % (', '.join(other.args), ', '.join(self.args)))
        if self.returns != other.returns:
            diffs.append('RETURNS %s, not %s' % (other.returns, self.returns))
        if self.or_replace != other.or_replace:
            diffs.append('CREATE%s FUNCTION, not CREATE%s FUNCTION'
                         % (' OR REPLACE' if other.or_replace else '',
                            ' OR REPLACE' if self.or_replace else ''))
        mine, theirs = self.labels(), other.labels()
        for label in mine:
            if mine[label] != theirs[label]:
                diffs.append('%s %s, not %s' % (label, theirs[label], mine[label]))
        return diffs


def is_create_function(stmt):
    w = stmt.words(4)
    return w[0] == 'create' and (w[1] == 'function' or w[1:4] == ['or', 'replace', 'function'])


# --------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------

def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def rel(path):
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def control():
    """default_version and comment of idempotency.control."""
    values = {}
    for line in read(os.path.join(ROOT, EXTENSION + '.control')).splitlines():
        m = re.match(r"\s*(\w+)\s*=\s*'(.*)'\s*$", line)
        if m:
            values[m.group(1)] = m.group(2)
    return values


class Script:
    """An extension script of the C edition: 1.0's (frm None) or an update."""

    def __init__(self, frm, to, pieces):
        self.frm = frm
        self.to = to
        self.sql = ''.join(text for _, text in pieces)
        self.where = 'sql/%s/*.sql' % to if frm is None else pieces[0][0]
        self.origins = []       # (offset, file) of each piece
        offset = 0
        for path, text in pieces:
            self.origins.append((offset, path))
            offset += len(text)

    def locate(self, offset):
        """file:line of an offset into the script."""
        start, path = [o for o in self.origins if o[0] <= offset][-1]
        return '%s:%d' % (path, self.sql.count('\n', start, offset) + 1)


def edition_scripts():
    """[Script]: 1.0's, then each update script in order."""
    first_dir = os.path.join(ROOT, 'sql', FIRST_VERSION)
    pieces = sorted(f for f in os.listdir(first_dir) if f.endswith('.sql'))
    scripts = [Script(None, FIRST_VERSION,
                      [('sql/%s/%s' % (FIRST_VERSION, f), read(os.path.join(first_dir, f)))
                       for f in pieces])]
    updates = {}
    for f in os.listdir(os.path.join(ROOT, 'sql')):
        m = re.fullmatch(re.escape(EXTENSION) + r'--([^-]+)--([^-]+)\.sql', f)
        if m:
            updates[m.group(1)] = (m.group(2), f)
    target = control()['default_version']
    version = FIRST_VERSION
    while version != target:
        if version not in updates:
            raise BuildError('no update script from %s on the way to %s' % (version, target))
        to, f = updates.pop(version)
        scripts.append(Script(version, to, [('sql/' + f, read(os.path.join(ROOT, 'sql', f)))]))
        version = to
    return scripts


class Portable:
    """A portable body (or helper block) of sql/portable/<concern>.sql."""

    def __init__(self, symbol, since, where, sql, statements):
        self.symbol = symbol        # None for a helper block
        self.since = since          # helper blocks: the version they start in
        self.where = where
        self.sql = sql
        self.statements = statements
        self.used = False
        if symbol is not None:
            if len(statements) != 1 or not is_create_function(statements[0]):
                raise BuildError('%s: the body of %s must be one CREATE FUNCTION statement'
                                 % (where, symbol))
            self.header = FunctionHeader(statements[0], where)
            if self.header.language in ('c', 'internal'):
                raise BuildError('%s: the portable body of %s is in LANGUAGE %s'
                                 % (where, symbol, self.header.language))


def portable_sources(concerns=None):
    """{symbol: Portable} and [helper Portable] of sql/portable/."""
    directory = os.path.join(ROOT, 'sql', 'portable')
    files = sorted(f for f in (os.listdir(directory) if os.path.isdir(directory) else [])
                   if f.endswith('.sql'))
    if concerns is not None:
        missing = [c for c in concerns if c + '.sql' not in files]
        if missing:
            raise BuildError('no sql/portable/%s.sql' % missing[0])
        files = [c + '.sql' for c in concerns]
    bodies = {}
    helpers = []
    for f in files:
        path = os.path.join(directory, f)
        sql = read(path)
        # cut the file at its marker lines
        marks = []
        offset = 0
        for number, line in enumerate(sql.splitlines(keepends=True), 1):
            m, h = MARKER.match(line), HELPER_MARKER.match(line)
            if m or h:
                marks.append((offset, number, m.group(1) if m else None,
                              h.group(1) if h else None))
            offset += len(line)
        marks.append((len(sql), None, None, None))
        preamble = split_statements(sql[:marks[0][0]], rel(path))
        if preamble:
            raise BuildError('%s: a statement before the first "-- portable:" marker' % rel(path))
        for (start, number, symbol, since), (end, _, _, _) in zip(marks, marks[1:]):
            where = '%s:%d' % (rel(path), number)
            # keep offsets: blank out what is not this block
            block = ' ' * start + sql[start:end]
            p = Portable(symbol, since, where, block, split_statements(block, where))
            if symbol is None:
                helpers.append(p)
            elif symbol in bodies:
                raise BuildError('%s: a second body of %s (the first is at %s)'
                                 % (where, symbol, bodies[symbol].where))
            else:
                bodies[symbol] = p
    return bodies, helpers


# --------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------

def stub(header):
    """A body for a symbol without a portable one (--allow-missing)."""
    toks = header.stmt.tokens
    sql = header.stmt.sql
    first, last = sorted([header.language_span, header.as_span])
    if first[1] + 1 != last[0]:
        # keep it simple: LANGUAGE C and AS ... must be adjacent in the C script
        pieces = [sql[header.stmt.start:toks[first[0]].start],
                  sql[toks[first[1]].end:toks[last[0]].start]]
    else:
        pieces = [sql[header.stmt.start:toks[first[0]].start]]
    tail = sql[toks[last[1]].end:header.stmt.end]
    return ''.join(pieces) + (
        "LANGUAGE plpgsql\nAS $portable_stub$\nBEGIN\n"
        "    RAISE EXCEPTION '%s is not in the portable edition yet'\n"
        "        USING ERRCODE = 'feature_not_supported';\n"
        "END\n$portable_stub$" % header.name) + tail.rstrip(';').rstrip() + ';'


def assemble(script, bodies, helpers, allow_missing, missing):
    """The portable text of one script: C definitions replaced."""
    sql, where, version = script.sql, script.where, script.to
    out = []
    pos = 0
    helpers_done = False
    for stmt in split_statements(sql, where):
        where = script.locate(stmt.start)
        if stmt.tokens[0].kind == 'meta':
            if re.match(r'\\echo\b', stmt.text):
                # pg_tle empties such lines itself; psql -f must not \quit
                out.append(sql[pos:stmt.start])
                pos = stmt.end
                continue
            raise BuildError('%s: psql command %r' % (where, stmt.text))
        if not is_create_function(stmt):
            continue
        header = FunctionHeader(stmt, where)
        if header.language != 'c':
            continue
        symbol = header.symbol
        if symbol is None:
            raise BuildError("%s: %s: LANGUAGE C without AS 'MODULE_PATHNAME', '<symbol>'"
                             % (where, header.name))
        out.append(sql[pos:stmt.start])
        if not helpers_done:
            for h in helpers:
                if h.since == version:
                    out.append(helper_text(h))
                    h.used = True
            helpers_done = True
        body = bodies.get(symbol)
        if body is None:
            if not allow_missing:
                missing.append('%s (%s, %s)' % (symbol, header.signature(), where))
                pos = stmt.end
                continue
            out.append('-- no portable body of %s yet: a stub\n' % symbol)
            out.append(stub(header))
        else:
            diffs = header.differences(body.header)
            if diffs:
                raise BuildError('%s: the portable body of %s declares another function than %s:\n  %s'
                                 % (body.where, symbol, where, '\n  '.join(diffs)))
            body.used = True
            out.append('-- portable body of %s (%s)\n' % (symbol, body.where))
            out.append(body.statements[0].text)
        pos = stmt.end
    out.append(sql[pos:])
    text = ''.join(out)
    where = script.where
    if not helpers_done:
        for h in helpers:
            if h.since == version:
                text += '\n' + helper_text(h) + '\n'
                h.used = True
    for t in lex(text, where):
        if t.kind == 'string' and 'MODULE_PATHNAME' in t.text:
            raise BuildError('%s: MODULE_PATHNAME is left in the portable script' % where)
        if t.kind == 'meta':
            raise BuildError('%s: psql command left in the portable script: %s' % (where, t.text))
    return text


def helper_text(h):
    return '-- portable helpers (%s)\n%s\n' % (
        h.where, '\n'.join(s.text for s in h.statements))


def build_edition(allow_missing=False):
    """[(from, to, portable sql)] for 1.0 and every update."""
    bodies, helpers = portable_sources()
    missing = []
    scripts = []
    for script in edition_scripts():
        scripts.append((script.frm, script.to,
                        assemble(script, bodies, helpers, allow_missing, missing)))
    if missing:
        raise BuildError('no portable body of %d C function%s:\n  %s'
                         % (len(missing), '' if len(missing) == 1 else 's',
                            '\n  '.join(missing)))
    unused = [b.where + ' (' + b.symbol + ')' for b in bodies.values() if not b.used]
    unused += [h.where + ' (since ' + h.since + ')' for h in helpers if not h.used]
    if unused:
        raise BuildError('portable code that no script uses:\n  ' + '\n  '.join(unused))
    return scripts


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------

CONFIG_DUMP = re.compile(
    r"SELECT\s+pg_catalog\.pg_extension_config_dump\s*\(\s*'[^']*'\s*,\s*'[^']*'\s*\)\s*;",
    re.IGNORECASE)

VERSION_TABLE = SCHEMA + '.plain_version'


def plain_body(sql, where):
    """An extension script made fit for psql -f: no pg_extension_config_dump
    (pg_dump dumps a plain schema whole anyway)."""
    text = CONFIG_DUMP.sub('-- (pg_extension_config_dump: extension only)', sql)
    if 'pg_extension_config_dump' in ''.join(
            t.text for t in lex(text, where) if t.kind not in ('comment',)):
        raise BuildError('%s: a pg_extension_config_dump call of another form' % where)
    return text


PLAIN_HEADER = """\
-- idempotency {what}: the portable edition as a plain SQL script.
-- Generated by scripts/portable.py from sql/ and sql/portable/; do not edit.
-- Run it as the database owner: psql -v ON_ERROR_STOP=1 -f <this file>.
-- See doc/portable.md.
\\set ON_ERROR_STOP on
BEGIN;
"""


def plain_install(scripts, version):
    """One file: the schema at "version", created by 1.0 and each update."""
    parts = [PLAIN_HEADER.format(what='%s, install' % version),
             'CREATE SCHEMA %s;\n' % SCHEMA,
             # as CREATE EXTENSION runs its scripts
             'SET LOCAL search_path = %s;\nSET LOCAL client_min_messages = warning;\n' % SCHEMA,
             '-- the version of the plain-script edition installed here\n'
             'CREATE TABLE %s (\n'
             '    version text NOT NULL,\n'
             '    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton)\n'
             ');\n'
             "INSERT INTO %s (version) VALUES ('%s');\n"
             % (VERSION_TABLE, VERSION_TABLE, FIRST_VERSION)]
    for frm, to, sql in scripts:
        parts.append('\n-- ======== %s ========\n' % (to if frm is None else frm + ' -> ' + to))
        parts.append(plain_body(sql, to))
        parts.append("\nUPDATE %s SET version = '%s';\n" % (VERSION_TABLE, to))
        if to == version:
            break
    parts.append('REVOKE ALL ON %s FROM PUBLIC;\nCOMMIT;\n' % VERSION_TABLE)
    return ''.join(parts)


def plain_update(frm, to, sql):
    return ''.join([
        PLAIN_HEADER.format(what='%s -> %s, update' % (frm, to)),
        'DO $plain_update$\nBEGIN\n'
        '    IF (SELECT v.version FROM %s v FOR UPDATE) IS DISTINCT FROM %s THEN\n'
        "        RAISE EXCEPTION 'this script updates idempotency %s to %s'\n"
        "            USING ERRCODE = 'object_not_in_prerequisite_state',\n"
        "                  DETAIL = pg_catalog.format('The installed version is %%s.',\n"
        '                      (SELECT v.version FROM %s v));\n'
        '    END IF;\nEND\n$plain_update$;\n'
        % (VERSION_TABLE, "'%s'" % frm, frm, to, VERSION_TABLE),
        plain_body(sql, '%s--%s' % (frm, to)),
        "\nUPDATE %s SET version = '%s';\nCOMMIT;\n" % (VERSION_TABLE, to),
    ])


def tle_installer(scripts):
    ctl = control()
    parts = [
        '-- idempotency through pg_tle (Trusted Language Extensions), version %s.\n'
        '-- Generated by scripts/portable.py from sql/ and sql/portable/; do not edit.\n'
        '-- Run it as a role with pgtle_admin, in the database, with pg_tle 1.5.0 or\n'
        '-- later installed there; then CREATE EXTENSION idempotency.  Run again\n'
        '-- (this file or a newer one), it registers only the versions and update\n'
        '-- paths that are not registered yet; then ALTER EXTENSION idempotency\n'
        '-- UPDATE.  See doc/managed-services.md.\n'
        '\\set ON_ERROR_STOP on\nBEGIN;\n' % ctl['default_version']]
    for frm, to, sql in scripts:
        for bad in TLE_FORBIDDEN + (TLE_QUOTE,):
            if bad in sql:
                raise BuildError('the script of %s contains %s, which the pg_tle installer cannot quote'
                                 % (to, bad))
        if frm is None:
            parts.append("SELECT pgtle.install_extension(\n    '%s',\n    '%s',\n    %s,\n%s\n%s%s,\n"
                         "    NULL,\n    '%s')\n"
                         " WHERE NOT EXISTS (SELECT FROM pgtle.available_extension_versions()"
                         " WHERE name = '%s');\n"
                         % (EXTENSION, to, sql_literal(ctl['comment']), TLE_QUOTE, sql,
                            TLE_QUOTE, SCHEMA, EXTENSION))
        else:
            parts.append("SELECT pgtle.install_update_path('%s', '%s', '%s',\n%s\n%s%s)\n"
                         " WHERE NOT EXISTS (SELECT FROM pgtle.extension_update_paths('%s')"
                         " WHERE source = '%s' AND target = '%s' AND path = '%s--%s');\n"
                         % (EXTENSION, frm, to, TLE_QUOTE, sql, TLE_QUOTE,
                            EXTENSION, frm, to, frm, to))
    parts.append("SELECT pgtle.set_default_version('%s', '%s');\nCOMMIT;\n"
                 % (EXTENSION, ctl['default_version']))
    return ''.join(parts)


def sql_literal(s):
    return "'" + s.replace("'", "''") + "'"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)


def cmd_build(args):
    scripts = build_edition(args.allow_missing)
    out = args.out
    for name in os.listdir(out) if os.path.isdir(out) else []:
        if name.startswith(EXTENSION) and name.endswith('.sql'):
            os.remove(os.path.join(out, name))
    for frm, to, sql in scripts:
        write(os.path.join(out, '%s--%s.sql' % (EXTENSION, to)), plain_install(scripts, to))
        if frm is not None:
            write(os.path.join(out, '%s--%s--%s.sql' % (EXTENSION, frm, to)),
                  plain_update(frm, to, sql))
    write(os.path.join(out, '%s-tle.sql' % EXTENSION), tle_installer(scripts))
    print('portable edition %s%s written to %s'
          % (control()['default_version'],
             ' (with stubs: --allow-missing)' if args.allow_missing else '', rel(out)))


def cmd_check(args):
    build_edition(False)
    print('every C function has a portable body that declares the same function')


def cmd_scratch(args):
    bodies, helpers = portable_sources(args.concerns)
    # check each body against its C definition first
    c_headers = {}
    for script in edition_scripts():
        for stmt in split_statements(script.sql, script.where):
            if stmt.tokens[0].kind != 'meta' and is_create_function(stmt):
                h = FunctionHeader(stmt, script.locate(stmt.start))
                if h.symbol:
                    c_headers[h.symbol] = h
    names = set()
    for symbol, body in bodies.items():
        if symbol not in c_headers:
            raise BuildError('%s: no C function binds %s' % (body.where, symbol))
        diffs = c_headers[symbol].differences(body.header)
        if diffs:
            raise BuildError('%s: %s: %s' % (body.where, symbol, '; '.join(diffs)))
        names.add(body.header.name.split('.', 1)[1])
    for h in helpers:
        for stmt in h.statements:
            if is_create_function(stmt):
                names.add(FunctionHeader(stmt, h.where).name.split('.', 1)[1])
    text = '\n'.join([helper_text(h) for h in helpers]
                     + [b.statements[0].text for b in bodies.values()]) + '\n'
    for name in names:
        text = re.sub(r'\b%s\.%s(\s*\()' % (SCHEMA, re.escape(name)),
                      r'%s.%s\1' % (args.schema, name), text)
    sys.stdout.write('-- generated by scripts/portable.py scratch: %s\n%s'
                     % (', '.join(args.concerns), text))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    b = sub.add_parser('build', help='write the plain-SQL and pg_tle scripts')
    b.add_argument('--out', default=os.path.join(ROOT, 'build', 'portable'))
    b.add_argument('--allow-missing', action='store_true',
                   help='stub the C functions without a portable body (work in progress)')
    b.set_defaults(func=cmd_build)
    c = sub.add_parser('check', help='check the portable bodies, write nothing')
    c.set_defaults(func=cmd_check)
    s = sub.add_parser('scratch', help='print portable bodies renamed into another schema')
    s.add_argument('--schema', required=True)
    s.add_argument('concerns', nargs='+')
    s.set_defaults(func=cmd_scratch)
    args = parser.parse_args()
    try:
        args.func(args)
    except BuildError as e:
        sys.stderr.write('portable.py: %s\n' % e)
        sys.exit(1)


if __name__ == '__main__':
    main()
