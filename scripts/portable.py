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
whose header differs, or a body that no script uses is an error.  A body
written CREATE FUNCTION also serves a later script that states the same
symbol again with CREATE OR REPLACE (so that an installation updated by
that script gets a body that changed), emitted with OR REPLACE.

One body can serve the symbols of every version of a function, as one C
function serves its old symbols:

    -- portable: <symbol>, <older symbol>...

The statement is written for the first symbol.  For each older one it is
emitted with that symbol's C header (CREATE [OR REPLACE], arguments,
labels) and the body's own LANGUAGE, SECURITY, SET, COST and AS; the
older symbol's arguments must be the first ones of the body's, and those
it lacks are declared in the PL/pgSQL body at their defaults (as the C
reads a missing argument by PG_NARGS()).

Helpers, the functions the bodies share, are kept in blocks under

    -- portable helper: since <version>[, again in <version>...]

and emitted in the script of that version, before its first C function
(at its end when it has none).  A block "again in" later versions is
emitted there too, with CREATE OR REPLACE: a helper that a version
changes is replaced by that version's script, since an installation
updated to it has the helpers of the edition that installed the older
version, not this one's.  Such a block holds only statements that may
run again: CREATE FUNCTION, COMMENT, REVOKE, GRANT and CREATE SEQUENCE IF
NOT EXISTS (state that helpers keep where callers cannot write it).

    portable.py build [--out DIR] [--allow-missing]
        writes DIR (default build/portable):
          idempotency--<v>.sql       plain-SQL install of version v (psql -f),
                                     for each v from PORTABLE_FIRST_VERSION on
          idempotency--<a>--<b>.sql  plain-SQL update from a to b, likewise
          idempotency-tle.sql        pg_tle installer: the first served and
                                     the default version as install scripts,
                                     the update paths between served versions
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
# The first version whose tables the portable bodies serve (doc/portable.md,
# "Edition differences"): no output of the edition installs or updates an
# older one.
PORTABLE_FIRST_VERSION = '1.3'
# The dollar quote of the pg_tle installer; pg_tle itself forbids these two.
TLE_QUOTE = '$_idempotency_tle_$'
TLE_FORBIDDEN = ('$_pgtle_o_$', '$_pgtle_i_$')

MARKER = re.compile(r'^--\s*portable:\s*(\S+(?:\s*,\s*\S+)*)\s*$')
HELPER_MARKER = re.compile(r'^--\s*portable helper:\s*since\s+([^\s,]+)'
                           r'(?:\s*,\s*again in\s+(\S+(?:\s*,\s*\S+)*))?\s*$')


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
        self.arg_tokens = []        # (tokens, index of DEFAULT or None)
        for arg in split_top_level(toks[i + 1:j]):
            norm = normal_tokens(arg)
            # "name type = expr" is "name type DEFAULT expr"
            depth = 0
            default = None
            for k, t in enumerate(arg):
                if t.text in ('(', '['):
                    depth += 1
                elif t.text in (')', ']'):
                    depth -= 1
                elif depth == 0 and t.text == '=':
                    norm[k] = 'default'
                if depth == 0 and norm[k] == 'default' and default is None:
                    default = k
            self.args.append(join_tokens(norm))
            self.arg_tokens.append((arg, default))
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
        # (first, last) of LANGUAGE, SECURITY, SET, COST and AS: the clauses
        # that may differ from the C function's
        self.own_spans = []
        end = len(toks) - 1 if toks[-1].text == ';' else len(toks)
        while j < end:
            w = toks[j].word()
            if w == 'language':
                self.language = toks[j + 1].text.strip("'").lower()
                self.language_span = (j, j + 1)
                self.own_spans.append(self.language_span)
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
                self.own_spans.append((j, j + 1))
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
                else:
                    self.own_spans.append((j, j + 1))
                j += 2
            elif w == 'set':
                # SET name {TO | =} value [, ...] | SET name FROM CURRENT
                first = j
                j += 2
                if toks[j].word() == 'from':
                    j += 2
                else:
                    j += 1
                    j += 1
                    while j < end and toks[j].text == ',':
                        j += 2
                self.own_spans.append((first, j - 1))
            elif w == 'as':
                k = j + 1
                self.body = [toks[k]]
                if k + 2 < end + 1 and toks[k + 1].text == ',':
                    self.body.append(toks[k + 2])
                    k += 2
                self.as_span = (j, k)
                self.own_spans.append(self.as_span)
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

    def differences(self, other, ignore_or_replace=False):
        """How "other" (a portable body) declares another function than self."""
        diffs = []
        if self.name != other.name:
            diffs.append('name %s, not %s' % (other.name, self.name))
        if self.args != other.args:
            diffs.append('arguments (%s), not (%s)'
                         % (', '.join(other.args), ', '.join(self.args)))
        if self.returns != other.returns:
            diffs.append('RETURNS %s, not %s' % (other.returns, self.returns))
        if self.or_replace != other.or_replace and not ignore_or_replace:
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

    def __init__(self, symbol, since, where, sql, statements, again=()):
        self.symbol = symbol        # None for a helper block
        self.since = since          # helper blocks: the version they start in
        self.again = list(again)    # helper blocks: versions that replace them
        self.again_used = set()
        self.where = where
        self.sql = sql
        self.statements = statements
        self.used = False
        self.primary = None         # the body of a newer symbol serving this one
        if symbol is not None:
            if len(statements) != 1 or not is_create_function(statements[0]):
                raise BuildError('%s: the body of %s must be one CREATE FUNCTION statement'
                                 % (where, symbol))
            self.header = FunctionHeader(statements[0], where)
            if self.header.language in ('c', 'internal'):
                raise BuildError('%s: the portable body of %s is in LANGUAGE %s'
                                 % (where, symbol, self.header.language))
        elif self.again:
            for stmt in statements:
                if not (is_create_function(stmt)
                        or stmt.words(1)[0] in ('comment', 'revoke', 'grant')
                        or stmt.words(5) == ['create', 'sequence', 'if', 'not', 'exists']):
                    raise BuildError('%s: a helper block "again in" later versions may hold only '
                                     'CREATE FUNCTION, CREATE SEQUENCE IF NOT EXISTS, COMMENT, '
                                     'REVOKE and GRANT' % where)

    @classmethod
    def serving(cls, primary, symbol):
        """The body of an older symbol, served by "primary"."""
        p = cls.__new__(cls)
        p.symbol, p.where, p.used, p.primary = symbol, primary.where, False, primary
        return p

    def statement(self, c_header):
        """The text of this body, which must declare c_header's function."""
        if self.primary is None:
            # a later script that states the function again (CREATE OR
            # REPLACE, so that an installation it updates gets a body that
            # changed) takes the body written for the first CREATE
            again = c_header.or_replace and not self.header.or_replace
            diffs = c_header.differences(self.header, ignore_or_replace=again)
            if diffs:
                raise BuildError('%s: the portable body of %s declares another function than %s:\n  %s'
                                 % (self.where, self.symbol, c_header.where, '\n  '.join(diffs)))
            stmt = self.statements[0]
            if again:
                first = stmt.tokens[0].end - stmt.start
                return stmt.text[:first] + ' OR REPLACE' + stmt.text[first:]
            return stmt.text
        text = older_statement(self.primary, c_header)
        h = FunctionHeader(split_statements(text, self.where)[0], self.where)
        diffs = c_header.differences(h)
        if diffs:       # older_statement() keeps the C's header: cannot happen
            raise BuildError('%s: %s as served by %s:\n  %s'
                             % (self.where, self.symbol, self.primary.symbol, '\n  '.join(diffs)))
        return text


def c_header_parts(header):
    """The C statement of header without LANGUAGE C and AS ...: the text
    before those clauses (and between them), and the labels after them."""
    toks = header.stmt.tokens
    sql = header.stmt.sql
    first, last = sorted([header.language_span, header.as_span])
    head = sql[header.stmt.start:toks[first[0]].start]
    if first[1] + 1 != last[0]:
        head += sql[toks[first[1]].end:toks[last[0]].start]
    tail = sql[toks[last[1]].end:header.stmt.end]
    return head, tail.rstrip(';').rstrip()


def older_statement(primary, c_header):
    """primary's function declared with c_header, an older symbol's: the C
    header, then primary's own clauses; the arguments c_header lacks are
    declared in the PL/pgSQL body at their defaults."""
    body = primary.header
    n = len(c_header.args)
    if (c_header.name, c_header.returns) != (body.name, body.returns) or body.args[:n] != c_header.args:
        raise BuildError('%s: %s cannot serve %s (%s): its arguments must be the first ones of %s'
                         % (primary.where, primary.symbol, c_header.symbol, c_header.where,
                            body.signature()))
    sql = body.stmt.sql
    declare = []
    for arg, default in body.arg_tokens[n:]:
        if default is None or len(arg) < 3:
            raise BuildError('%s: %s: argument %s has no default for the older %s'
                             % (primary.where, body.name, arg[0].text, c_header.symbol))
        declare.append('    %s %s := %s;\n' % (arg[0].text, sql[arg[1].start:arg[default - 1].end],
                                               sql[arg[default + 1].start:arg[-1].end]))
    toks = body.stmt.tokens
    own = []
    for first, last in body.own_spans:
        text = sql[toks[first].start:toks[last].end]
        if (first, last) == body.as_span and declare:
            quoted = toks[last]
            if body.language != 'plpgsql' or quoted.kind != 'dollar' or first + 1 != last:
                raise BuildError('%s: %s: only a PL/pgSQL body in dollar quotes can declare '
                                 'the arguments of an older symbol' % (primary.where, body.name))
            tag = DOLLAR_TAG.match(quoted.text).group(0)
            text = (sql[toks[first].start:quoted.start] + tag
                    + ('\nDECLARE\n    -- not arguments of %s: their defaults\n%s'
                       % (c_header.symbol, ''.join(declare))).rstrip('\n')
                    + quoted.text[len(tag):])
        own.append(text)
    head, labels = c_header_parts(c_header)
    return '%s%s\n%s;' % (head.rstrip(), '\n' + labels.strip() if labels.strip() else '',
                           '\n'.join(own))


def plain_backslashes(sql, where, base=0):
    """Offsets of the plain '...' literals that hold a backslash, in sql
    and in the dollar-quoted bodies within.  A portable body is compiled in
    the caller's session, where standard_conforming_strings = off makes
    such a literal take backslash escapes (another value, or an
    unterminated string); an E'...' literal means the same under every
    setting."""
    found = []
    for t in lex(sql, where):
        if t.kind == 'string' and t.text.startswith("'") and '\\' in t.text:
            found.append(base + t.start)
        elif t.kind == 'dollar':
            tag = DOLLAR_TAG.match(t.text).group(0)
            found += plain_backslashes(t.text[len(tag):len(t.text) - len(tag)], where,
                                       base + t.start + len(tag))
    return found


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
        for offset in plain_backslashes(sql, rel(path)):
            raise BuildError('%s:%d: a backslash in a plain \'...\' literal: under '
                             'standard_conforming_strings = off it escapes; write an '
                             'E\'...\' string (backslashes doubled) or chr(92)'
                             % (rel(path), sql.count('\n', 0, offset) + 1))
        # cut the file at its marker lines
        marks = []
        offset = 0
        for number, line in enumerate(sql.splitlines(keepends=True), 1):
            m, h = MARKER.match(line), HELPER_MARKER.match(line)
            if m or h:
                marks.append((offset, number, re.split(r'\s*,\s*', m.group(1)) if m else None,
                              h.group(1) if h else None,
                              re.split(r'\s*,\s*', h.group(2)) if h and h.group(2) else ()))
            offset += len(line)
        marks.append((len(sql), None, None, None, None))
        preamble = split_statements(sql[:marks[0][0]], rel(path))
        if preamble:
            raise BuildError('%s: a statement before the first "-- portable:" marker' % rel(path))
        for (start, number, symbols, since, again), end in zip(marks, [m[0] for m in marks[1:]]):
            where = '%s:%d' % (rel(path), number)
            # keep offsets: blank out what is not this block
            block = ' ' * start + sql[start:end]
            statements = split_statements(block, where)
            if symbols is None:
                helpers.append(Portable(None, since, where, block, statements, again))
                continue
            p = Portable(symbols[0], None, where, block, statements)
            for symbol in symbols:
                if symbol in bodies:
                    raise BuildError('%s: a second body of %s (the first is at %s)'
                                     % (where, symbol, bodies[symbol].where))
                bodies[symbol] = p if symbol == symbols[0] else Portable.serving(p, symbol)
    return bodies, helpers


# --------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------

def stub(header):
    """A body for a symbol without a portable one (--allow-missing)."""
    head, labels = c_header_parts(header)
    return head + (
        "LANGUAGE plpgsql\nAS $portable_stub$\nBEGIN\n"
        "    RAISE EXCEPTION '%s is not in the portable edition yet'\n"
        "        USING ERRCODE = 'feature_not_supported';\n"
        "END\n$portable_stub$" % header.name) + labels + ';'


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
            out.append(version_helpers(helpers, version))
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
            text = body.statement(header)
            body.used = True
            out.append('-- portable body of %s (%s%s)\n'
                       % (symbol, body.where,
                          ', the body of ' + body.primary.symbol if body.primary else ''))
            out.append(text)
        pos = stmt.end
    out.append(sql[pos:])
    text = ''.join(out)
    where = script.where
    if not helpers_done:
        helpers_text = version_helpers(helpers, version)
        if helpers_text:
            text += '\n' + helpers_text + '\n'
    for t in lex(text, where):
        if t.kind == 'string' and 'MODULE_PATHNAME' in t.text:
            raise BuildError('%s: MODULE_PATHNAME is left in the portable script' % where)
        if t.kind == 'meta':
            raise BuildError('%s: psql command left in the portable script: %s' % (where, t.text))
    return text


def helper_text(h, again=False):
    """The statements of a helper block; again: as a later version replaces
    them (CREATE OR REPLACE FUNCTION)."""
    texts = []
    for stmt in h.statements:
        text = stmt.text
        if again and is_create_function(stmt) and stmt.words(2)[1] == 'function':
            text = text[:stmt.tokens[0].end - stmt.start] + ' OR REPLACE' + text[stmt.tokens[0].end - stmt.start:]
        texts.append(text)
    return '-- portable helpers (%s%s)\n%s\n' % (
        h.where, ', again' if again else '', '\n'.join(texts))


def version_helpers(helpers, version):
    """The helper blocks that "version"'s script creates or replaces."""
    out = []
    for h in helpers:
        if h.since == version:
            out.append(helper_text(h))
            h.used = True
        elif version in h.again:
            out.append(helper_text(h, again=True))
            h.again_used.add(version)
    return ''.join(out)


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
    unused += [h.where + ' (again in ' + v + ')' for h in helpers for v in h.again
               if v not in h.again_used]
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


def version_key(v):
    return tuple(int(x) for x in v.split('.'))


def served(scripts):
    """The scripts of the versions the edition serves, PORTABLE_FIRST_VERSION on."""
    first = version_key(PORTABLE_FIRST_VERSION)
    return [(frm, to, sql) for frm, to, sql in scripts if version_key(to) >= first]


def tle_function_absent(name):
    """A WHERE clause: pg_tle has no function "name" (an install script
    "idempotency--<v>.sql" or an update path "idempotency--<a>--<b>.sql")."""
    return (" WHERE pg_catalog.to_regprocedure('pgtle.\"%s\"()') IS NULL;\n" % name)


def tle_installer(scripts):
    """The pg_tle installer.  It registers, each only where missing:

    - the first version the edition serves and the default version, each
      as a whole install script (1.0 and the updates to it, run in turn);
    - the update path between every two served versions.

    pg_tle makes a new extension depend on the install script of its
    default version, so pg_dump dumps that script before CREATE EXTENSION
    and pg_restore can create the extension at the version the restored
    control function names (pg_tle's issue #245; doc/portable.md).
    """
    ctl = control()
    default = ctl['default_version']
    for frm, to, sql in scripts:
        for bad in TLE_FORBIDDEN + (TLE_QUOTE,):
            if bad in sql:
                raise BuildError('the script of %s contains %s, which the pg_tle installer cannot quote'
                                 % (to, bad))
    parts = [
        '-- idempotency through pg_tle (Trusted Language Extensions), version %s.\n'
        '-- Generated by scripts/portable.py from sql/ and sql/portable/; do not edit.\n'
        '-- Run it as a role with pgtle_admin, in the database, with pg_tle 1.5.0 or\n'
        '-- later installed there; then CREATE EXTENSION idempotency.  Run again\n'
        '-- (this file or a newer one), it registers only the versions and update\n'
        '-- paths that are not registered yet; then ALTER EXTENSION idempotency\n'
        '-- UPDATE.  It registers %s and %s as install scripts and the update\n'
        '-- paths between the versions from %s on, which the edition serves.\n'
        '-- See doc/managed-services.md.\n'
        '\\set ON_ERROR_STOP on\nBEGIN;\n' % (default, PORTABLE_FIRST_VERSION, default,
                                            PORTABLE_FIRST_VERSION)]
    whole = [PORTABLE_FIRST_VERSION] + ([default] if default != PORTABLE_FIRST_VERSION else [])
    for i, version in enumerate(whole):
        body = whole_script(scripts, version)
        name = '%s--%s.sql' % (EXTENSION, version)
        if i == 0:
            # a database where nothing of the extension is registered yet
            parts.append("SELECT pgtle.install_extension(\n    '%s',\n    '%s',\n    %s,\n%s\n%s%s,\n"
                         "    NULL,\n    '%s')\n"
                         " WHERE NOT EXISTS (SELECT FROM pgtle.available_extension_versions()"
                         " WHERE name = '%s');\n"
                         % (EXTENSION, version, sql_literal(ctl['comment']), TLE_QUOTE, body,
                            TLE_QUOTE, SCHEMA, EXTENSION))
        else:
            parts.append("SELECT pgtle.install_extension_version_sql('%s', '%s',\n%s\n%s%s)\n%s"
                         % (EXTENSION, version, TLE_QUOTE, body, TLE_QUOTE, tle_function_absent(name)))
    for frm, to, sql in served(scripts):
        if frm is None or version_key(frm) < version_key(PORTABLE_FIRST_VERSION):
            continue
        parts.append("SELECT pgtle.install_update_path('%s', '%s', '%s',\n%s\n%s%s)\n%s"
                     % (EXTENSION, frm, to, TLE_QUOTE, sql, TLE_QUOTE,
                        tle_function_absent('%s--%s--%s.sql' % (EXTENSION, frm, to))))
    parts.append("SELECT pgtle.set_default_version('%s', '%s');\nCOMMIT;\n"
                 % (EXTENSION, default))
    return ''.join(parts)


def whole_script(scripts, version):
    """The extension script that creates "version" at once: 1.0's and each
    update to "version", in turn (as CREATE EXTENSION would run them)."""
    out = []
    for frm, to, sql in scripts:
        out.append('\n-- ======== %s ========\n' % (to if frm is None else frm + ' -> ' + to))
        out.append(sql)
        if to == version:
            return ''.join(out)
    raise BuildError('no script reaches version %s' % version)


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
    # only the versions the edition serves: an older layout would meet
    # PostgreSQL's errors, not the C library's refusal (doc/portable.md)
    for frm, to, sql in served(scripts):
        write(os.path.join(out, '%s--%s.sql' % (EXTENSION, to)), plain_install(scripts, to))
        if frm is not None and version_key(frm) >= version_key(PORTABLE_FIRST_VERSION):
            write(os.path.join(out, '%s--%s--%s.sql' % (EXTENSION, frm, to)),
                  plain_update(frm, to, sql))
    write(os.path.join(out, '%s-tle.sql' % EXTENSION), tle_installer(scripts))
    print('portable edition %s%s written to %s'
          % (control()['default_version'],
             ' (with stubs: --allow-missing)' if args.allow_missing else '', rel(out)))


# --------------------------------------------------------------------------
# The hot list: src/HOT names every C symbol the newest version binds
# --------------------------------------------------------------------------

HOT_LIST = os.path.join(ROOT, 'src', 'HOT')
HOT_KINDS = ('bench', 'needs', 'pending')
DROP_FUNCTION = re.compile(r'DROP\s+FUNCTION\s+([\w.]+)\s*\(([^)]*)\)', re.I)
MOVED_FUNCTION = re.compile(r"move_execute_grants\s*\(\s*'([\w.]+)\(([^)]*)\)'", re.I)


def newest_c_symbols():
    """{symbol: function} of the C functions an install of the newest
    version has: every script from 1.0 on, each function known by name and
    argument types, dropped by DROP FUNCTION or by move_execute_grants()."""
    def key(name, types):
        return (name.lower(), tuple(t.strip().lower() for t in types if t.strip()))
    functions = {}
    for script in edition_scripts():
        for stmt in split_statements(script.sql, script.where):
            if stmt.tokens[0].kind == 'meta':
                continue
            if is_create_function(stmt):
                h = FunctionHeader(stmt, script.locate(stmt.start))
                types = [a.split(' default ')[0].split(' ', 1)[1] for a in h.args]
                functions[key(h.name, types)] = h
                continue
            text = stmt.text
            for m in list(DROP_FUNCTION.finditer(text)) + list(MOVED_FUNCTION.finditer(text)):
                functions.pop(key(m.group(1), m.group(2).split(',')), None)
    return {h.symbol: h for h in functions.values() if h.symbol}


def bench_workloads():
    """The group/variant names of bench/run.sh's VARIANTS."""
    text = read(os.path.join(ROOT, 'bench', 'run.sh'))
    block = re.search(r'^VARIANTS="\n(.*?)^"', text, re.S | re.M)
    if not block:
        raise BuildError('bench/run.sh: no VARIANTS block')
    return {'/'.join(line.split()[:2]) for line in block.group(1).splitlines() if line.strip()}


def check_hot_list():
    """Errors of src/HOT against the newest version and bench/run.sh."""
    errors = []
    listed = {}
    workloads = bench_workloads()
    for n, line in enumerate(read(HOT_LIST).splitlines(), 1):
        where = 'src/HOT:%d' % n
        if not line.strip() or line.startswith('#'):
            continue
        words = line.split()
        if len(words) < 2 or words[1].rstrip(':') not in HOT_KINDS:
            errors.append('%s: not "<symbol> bench|needs|pending <reason>"' % where)
            continue
        listed[words[0]] = (where, words[1].rstrip(':'))
        if words[1] == 'bench':
            named = [w.rstrip(':') for w in words[2:] if '/' in w]
            if not named:
                errors.append('%s: %s names no make bench workload' % (where, words[0]))
            errors += ['%s: bench/run.sh runs no workload %s' % (where, w)
                       for w in named if w not in workloads]
        elif words[1] == 'needs' and len(words) < 3:
            errors.append('%s: %s says not what it needs' % (where, words[0]))
    bound = newest_c_symbols()
    errors += ['%s (%s) binds C symbol %s, which src/HOT does not list'
               % (h.where, h.name, s) for s, h in sorted(bound.items()) if s not in listed]
    errors += ['%s: the newest version binds no C symbol %s' % (w, s)
               for s, (w, _) in sorted(listed.items()) if s not in bound]
    return errors, listed


def cmd_check(args):
    build_edition(False)
    errors, listed = check_hot_list()
    if errors:
        raise BuildError('src/HOT:\n  ' + '\n  '.join(errors))
    pending = sum(1 for _, kind in listed.values() if kind == 'pending')
    print('every C function has a portable body that declares the same function')
    print('src/HOT lists the %d C symbols of the newest version (%d pending one body)'
          % (len(listed), pending))


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
    texts = []
    for symbol, body in bodies.items():
        if symbol not in c_headers:
            raise BuildError('%s: no C function binds %s' % (body.where, symbol))
        statement = body.statement(c_headers[symbol])
        if body.primary is None:        # one function for all its symbols
            names.add(body.header.name.split('.', 1)[1])
            texts.append(statement)
    for h in helpers:
        for stmt in h.statements:
            if is_create_function(stmt):
                names.add(FunctionHeader(stmt, h.where).name.split('.', 1)[1])
    text = '\n'.join([helper_text(h) for h in helpers] + texts) + '\n'
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
