# Makefile for the idempotency extension (PGXS)
#
#   make && make install      build and install into the server of PG_CONFIG
#   make installcheck         the regression and isolation tests against the
#                             running server (PGHOST, PGPORT), as a user who
#                             is not root; see CONFIG_REGRESS below
#   make run                  set up everything on a fresh machine and demo it
#   make test                 every test group on PostgreSQL 15, 17 and 18 in
#                             turn (test/matrix.sh; what CI runs): 15 on the
#                             host, 17 and 18 in Debian trixie/sid chroots
#                             cached in /var/tmp/idempotency-chroots
#   make test PG=17           the same for one major (or PG="15 18")
#   make matrix               same as make test
#   make bench                benchmarks against plain-SQL and Redis baselines
#                             (bench/run.sh) on PostgreSQL 15, on the host
#   make bench PG=18          the same on 17 or 18, in that major's chroot of
#                             make test (bench/chroot.sh); the report comes
#                             back as bench/results/<time>-pg18.md
#   make bench-scale          steady state with 1M, 10M and 50M live keys, 30
#                             minutes each, beside hand-written SQL
#                             (bench/scale.sh; SCALE_KEYS, SCALE_MINUTES,
#                             SCALE_WAL_COMPRESSION): keeps its records in
#                             bench/scale/runs/ and writes
#                             doc/performance-at-scale.md from the newest
#                             run of each count; SCALE_OUTLIVE=10000000
#                             measures the space of keys that outlive
#                             their answers instead
#   make stress               the TAP tests with the stress run at 60 s
#   make sanitize             regression tests under UBSan and valgrind (test/sanitize.sh)
#   make memory               backend memory across 1M calls (test/memory.sh)
#   make lint                 cppcheck and clang-tidy (test/lint.sh); make
#                             test runs it on the host's major
#   make dist                 the release zip for PGXN, idempotency-<version>.zip
#   make deb                  the Debian package postgresql-15-idempotency in
#                             build/deb/ (debian/, pg_buildext); PG=17 or PG=18
#                             builds it in that major's chroot (scripts/deb.sh)
#   make portable             the portable edition (plain SQL and pg_tle
#                             scripts) in build/portable/: scripts/portable.py,
#                             doc/portable.md; make test runs the whole suite
#                             on it (its group portable)
#
# PG_CONFIG picks the server to build against: the pg_config on PATH, else
# (or with PG_MAJOR=N on the command line) Debian's
# /usr/lib/postgresql/$(PG_MAJOR)/bin/pg_config, PG_MAJOR default 15.  See
# doc/testing.md for the supported majors.

EXTENSION = idempotency
MODULE_big = idempotency
# The extension's version is default_version in idempotency.control; the
# distribution's on PGXN (SemVer) says the same, as META.json does.
DISTVERSION = 1.9.0
# The version whose install script is assembled (see below); every later
# one is an update script.
BASE_VERSION = 1.0

OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))

# The install script of BASE_VERSION is assembled from the pieces in sql/1.0/
# (types, tables, functions, views, grants), pg_partman style, and stays
# frozen once released.  Every later version ships only as an update script,
# sql/idempotency--1.0--1.1.sql and so on, picked up by the wildcard below;
# bump default_version in idempotency.control with it.  CREATE EXTENSION then
# runs 1.0 and the update scripts in order, so a fresh install and an
# upgraded one are the same by construction.  C symbols keep their meaning
# forever: a changed SQL signature binds to a new symbol (idempotency_x_1_1)
# and the old one stays for databases not yet updated.
DATA_built = sql/$(EXTENSION)--$(BASE_VERSION).sql
DATA = $(filter-out $(DATA_built),$(wildcard sql/$(EXTENSION)--*.sql))

# The manual (doc/*.md) installs beside the other extensions' documentation,
# in a directory of its own (see docmoduledir after the include of PGXS).
DOCS := $(wildcard doc/*.md)

# make installcheck runs the regression and isolation suites against the
# running server (PGHOST, PGPORT), as for any PGXS extension, except the
# tests that need settings a server may not have: pg_cron and the library
# in shared_preload_libraries (the cron job, the outcome counts, claims
# that wait, the settings the library defines only when preloaded),
# wal_level = logical, prepared transactions.  Those run in a
# temporary instance of the installed server with test/installcheck.conf
# (pg_regress --temp-instance --temp-config, as contrib does), results in
# output_config/.  test/run.sh runs every test on a cluster set up so.
CONFIG_REGRESS = arguments metrics outbox_cdc read_only schedule
CONFIG_ISOLATION = claim_wait claim_wait_deadlock outbox_enqueue_rollback outbox_notify_setting
REGRESS = $(filter-out $(CONFIG_REGRESS),$(sort $(basename $(notdir $(wildcard test/sql/*.sql)))))
REGRESS_OPTS = --inputdir=test --load-extension=$(EXTENSION)
ISOLATION = $(filter-out $(CONFIG_ISOLATION),$(sort $(basename $(notdir $(wildcard test/specs/*.spec)))))
ISOLATION_OPTS = --inputdir=test --outputdir=. --load-extension=$(EXTENSION)
# PostgreSQL 15's pg_regress reads expected output from <inputdir>/expected;
# ours lives at the top level.
REGRESS_PREP = test/expected

# PostgreSQL's headers are system headers to us: -Wextra judges our code only.
PG_CPPFLAGS = -I$(srcdir)/src -isystem $(includedir_server) -isystem $(libpq_srcdir)
# schedule_cleanup() reaches pg_cron in another database over libpq, as dblink does.
SHLIB_LINK_INTERNAL = $(libpq)
PG_CFLAGS = -Wall -Wextra
EXTRA_CLEAN = $(DATA_built) test/expected results output_iso output_config regression.diffs regression.out tmp_check

# PG_CONFIG: the pg_config on PATH, as for any PGXS extension; where there
# is none, or PG_MAJOR is given on the command line, Debian's of PG_MAJOR
# (default 15), which Debian keeps off PATH.
PG_MAJOR ?= 15
ifneq ($(origin PG_MAJOR),command line)
PG_CONFIG ?= $(shell command -v pg_config)
endif
ifeq ($(PG_CONFIG),)
override PG_CONFIG = $(or $(wildcard /usr/lib/postgresql/$(PG_MAJOR)/bin/pg_config),pg_config)
endif
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
else
all:
	@echo "PostgreSQL server headers not found: run 'make run' or 'make test'," \
	      "which install them, or install postgresql-server-dev-$(PG_MAJOR)" >&2; exit 1
endif

# PGXS would install DOCS flat into $(docdir)/extension, where names such as
# reference.md would clash with other extensions' files: ours go one level
# down.  (The install recipe reads docmoduledir when it runs, so setting it
# after the include is enough.)
docmoduledir := extension/$(EXTENSION)

# every C file includes the shared headers: a change to them rebuilds them all
$(OBJS): $(wildcard src/*.h)

test/expected:
	ln -s ../expected $@

# The tests of CONFIG_REGRESS and CONFIG_ISOLATION (see above), first.
installcheck: installcheck-config
installcheck-config: submake $(REGRESS_PREP)
	$(pg_regress_installcheck) $(REGRESS_OPTS) --outputdir=output_config \
	  --temp-instance=output_config/tmp_check --temp-config=test/installcheck.conf $(CONFIG_REGRESS)
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) --outputdir=output_config/isolation \
	  --temp-instance=output_config/tmp_check_iso --temp-config=test/installcheck.conf $(CONFIG_ISOLATION)

$(DATA_built): $(sort $(wildcard sql/$(BASE_VERSION)/*.sql))
	cat $^ > $@

.PHONY: installcheck-config run test matrix bench bench-scale profile stress sanitize memory lint dist deb portable node-package
run:
	bash scripts/run.sh
test:
	bash test/matrix.sh $(PG)
matrix:
	bash test/matrix.sh
bench:
	for m in $(or $(PG),$(PG_MAJOR)); do PG_MAJOR=$$m bash bench/run.sh || exit 1; done

bench-scale:
	bash bench/scale.sh
profile:
	bash bench/profile.sh $(PROFILE_SCRIPTS)
stress:
	STRESS_SECONDS=$${STRESS_SECONDS:-60} TEST_GROUPS=tap bash test/run.sh
sanitize:
	bash test/sanitize.sh
memory:
	bash test/memory.sh
lint:
	bash test/lint.sh

# The release zip PGXN expects: the committed tree of HEAD under
# idempotency-<version>/, as pgvector and pg_cron make theirs.
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(DISTVERSION)/ -o $(EXTENSION)-$(DISTVERSION).zip HEAD

# The npm tarball of clients/node (build/pg-idempotency-<version>.tgz), the
# way to install the Node package until it is on the registry:
# scripts/node-package.sh.
node-package:
	bash scripts/node-package.sh $(or $(NODE_PACKAGE_DIR),build)

# The Debian binary package for one PostgreSQL major (default 15) in
# build/deb/, built from a copy of the tree: scripts/deb.sh.
deb:
	bash scripts/deb.sh $(PG)

# The portable edition (doc/portable.md): the scripts of sql/ with each C
# function replaced by its body in sql/portable/.  PORTABLE_PARTIAL=1 stubs
# a C function that has no portable body (portable.py check fails on one).
portable:
	python3 scripts/portable.py build$(if $(PORTABLE_PARTIAL), --allow-missing)
