"""Numbered schema migrations, append-only, each applied in its own transaction. Long
because it is one ordered list: the order of the functions is the schema's history, and
splitting it across files would hide that order.

Like simonw/llm's migrations: a list of functions, each recorded by name in `_migrations` once it has
run. Never edit a migration that has shipped; add a new one at the end. docs/schema.md is generated
from the result (`python -m kb.schema_doc`), and a test checks it is current.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import sqlite_utils

from kb.dbtx import now, transaction

Migration = Callable[[sqlite_utils.Database], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


REBUILDS: set[str] = set()
"""Migrations that rebuild a table other tables reference (SQLite's 12-step ALTER procedure)."""


def rebuilds_tables(fn: Migration) -> Migration:
    """Run this migration with foreign keys off, as SQLite requires to rebuild a referenced table
    (dropping it with them on would cascade); the references are checked before it commits."""
    REBUILDS.add(fn.__name__)
    return fn


def _sql(db: sqlite_utils.Database, script: str) -> None:
    # executescript() would COMMIT the migration's transaction; run statement by statement instead
    # (complete_statement knows that a trigger body's `;` does not end the CREATE TRIGGER).
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            db.execute(buffer)
            buffer = ""
    if buffer.strip():
        db.execute(buffer)


@migration
def m001_initial(db: sqlite_utils.Database) -> None:
    """Core tables: sources, evidence, hypotheses, patches, runs, waves, experiments, samples, ..."""
    _sql(
        db,
        """
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('paper', 'fork', 'inventory', 'note')),
    name TEXT,                -- fork name, note title, inventory label
    url TEXT,                 -- as given (URL, file path, git remote)
    canonical_url TEXT,       -- papers: canonical URL; forks: remote URL
    arxiv_id TEXT,
    title TEXT,
    authors TEXT,
    published TEXT,
    site TEXT,
    language TEXT,
    content_hash TEXT,        -- papers: sha256 of the extracted text
    ref TEXT,                 -- forks: branch; inventory: path scanned
    commit_sha TEXT,          -- forks: fork head; inventory: commit scanned
    merge_base TEXT,          -- forks: merge base with the target baseline
    meta TEXT,                -- JSON
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE UNIQUE INDEX sources_canonical ON sources (kind, canonical_url) WHERE canonical_url IS NOT NULL;
CREATE INDEX sources_hash ON sources (content_hash);
CREATE UNIQUE INDEX sources_fork_name ON sources (name) WHERE kind = 'fork';

CREATE TABLE evidence (
    id INTEGER PRIMARY KEY,   -- the evidence id hypotheses cite
    source_id INTEGER NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    kind TEXT NOT NULL CHECK (kind IN ('passage', 'commit', 'fusion', 'gap', 'single_op', 'note')),
    ref TEXT NOT NULL,        -- stable key within the source: passage number, sha, fusion key
    title TEXT,               -- paper title, commit subject, fusion ops
    section TEXT,             -- heading a passage sits under; backend of a fusion
    position INTEGER,         -- passage order within the paper
    body TEXT NOT NULL DEFAULT '',
    meta TEXT,                -- JSON: file, line, present/missing backends, ...
    created_at REAL NOT NULL,
    UNIQUE (source_id, kind, ref)
);
CREATE INDEX evidence_kind ON evidence (kind);

CREATE TABLE commits (
    evidence_id INTEGER PRIMARY KEY REFERENCES evidence (id) ON DELETE CASCADE,
    sha TEXT NOT NULL,
    author TEXT,
    authored_at TEXT,
    subject TEXT NOT NULL,
    message TEXT,
    files TEXT NOT NULL,      -- JSON list of paths
    insertions INTEGER NOT NULL DEFAULT 0,
    deletions INTEGER NOT NULL DEFAULT 0,
    diff TEXT,
    diff_truncated INTEGER NOT NULL DEFAULT 0,
    binary_files TEXT,        -- JSON list
    patch_id TEXT,
    upstreamed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX commits_sha ON commits (sha);

CREATE TABLE commit_files (
    evidence_id INTEGER NOT NULL REFERENCES evidence (id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    PRIMARY KEY (evidence_id, path)
);
CREATE INDEX commit_files_path ON commit_files (path);

CREATE TABLE fusions (
    evidence_id INTEGER PRIMARY KEY REFERENCES evidence (id) ON DELETE CASCADE,
    backend TEXT NOT NULL,
    ops TEXT NOT NULL,        -- e.g. RMS_NORM+MUL
    kind TEXT NOT NULL CHECK (kind IN ('graph', 'single')),
    file TEXT NOT NULL,
    line INTEGER NOT NULL,
    commit_sha TEXT
);
CREATE INDEX fusions_ops ON fusions (ops, backend);

CREATE TABLE hypotheses (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    rationale TEXT NOT NULL DEFAULT '',
    expected_effect REAL,     -- relative improvement of the primary metric, 0.03 = +3%
    risk TEXT,
    confidence REAL,
    cost REAL,
    priority REAL NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'proposed'
        CHECK (status IN ('proposed', 'approved', 'rejected', 'patched', 'unpatchable')),
    origin TEXT NOT NULL DEFAULT 'manual',  -- manual, miner:gap, miner:fork, llm, import
    dedupe_key TEXT,          -- miners: idempotence key
    llm_call_id INTEGER REFERENCES llm_calls (id),
    notes TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE UNIQUE INDEX hypotheses_dedupe ON hypotheses (dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX hypotheses_status ON hypotheses (status, priority);

CREATE TABLE hypothesis_evidence (
    hypothesis_id INTEGER NOT NULL REFERENCES hypotheses (id) ON DELETE CASCADE,
    evidence_id INTEGER NOT NULL REFERENCES evidence (id),
    note TEXT,
    PRIMARY KEY (hypothesis_id, evidence_id)
);
CREATE INDEX hypothesis_evidence_evidence ON hypothesis_evidence (evidence_id);

CREATE TABLE hypothesis_sources (
    -- free-form provenance for manual hypotheses: URL, fork:NAME@SHA, gap:ID, note:TEXT
    hypothesis_id INTEGER NOT NULL REFERENCES hypotheses (id) ON DELETE CASCADE,
    ref TEXT NOT NULL,
    PRIMARY KEY (hypothesis_id, ref)
);

CREATE TABLE patches (
    id INTEGER PRIMARY KEY,
    hypothesis_id INTEGER NOT NULL REFERENCES hypotheses (id),
    diff TEXT NOT NULL,
    diff_sha TEXT NOT NULL,   -- sha256 of the diff text
    files TEXT NOT NULL,      -- JSON list of touched paths
    author_kind TEXT NOT NULL CHECK (author_kind IN ('manual', 'fork_commit', 'llm')),
    author TEXT,              -- fork commit sha, model name, or file name
    llm_call_id INTEGER REFERENCES llm_calls (id),
    apply_status TEXT,        -- ok, conflict, unchecked
    apply_error TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX patches_hypothesis ON patches (hypothesis_id);

CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL CHECK (status IN ('running', 'paused', 'finished', 'failed', 'interrupted')),
    branch TEXT,              -- autoresearch/<name>
    baseline_commit TEXT,     -- the original baseline
    head_commit TEXT,         -- baseline + winners so far
    backend TEXT NOT NULL DEFAULT 'local',
    policy TEXT,              -- JSON: min_effect, alpha, max_pairs, direction, metric
    budget TEXT,              -- JSON
    options TEXT,             -- JSON: the run's command-line options (for --resume)
    pid INTEGER,
    host TEXT,
    noise_floor REAL,
    self_test TEXT,           -- JSON: A/A result
    summary TEXT,             -- JSON: final stack and ablation results
    cost_usd REAL NOT NULL DEFAULT 0,
    error TEXT,
    imported_from TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    heartbeat_at REAL
);

CREATE TABLE waves (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    number INTEGER NOT NULL,
    baseline_commit TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'finished', 'cancelled')),
    reflection_evidence_id INTEGER REFERENCES evidence (id),
    started_at REAL NOT NULL,
    ended_at REAL,
    UNIQUE (run_id, number)
);

CREATE TABLE workers (
    id INTEGER PRIMARY KEY,
    run_id INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    name TEXT NOT NULL,       -- local slot name or SkyPilot cluster name
    backend TEXT NOT NULL CHECK (backend IN ('local', 'skypilot')),
    status TEXT NOT NULL DEFAULT 'provisioning'
        CHECK (status IN ('provisioning', 'qualifying', 'ready', 'busy', 'down', 'lost', 'failed')),
    resources TEXT,           -- JSON
    noise REAL,               -- A/A per-sample CV measured when qualifying
    price_per_hour REAL,
    cost_usd REAL NOT NULL DEFAULT 0,
    meta TEXT,                -- JSON (cluster handle info, reason of failure)
    started_at REAL NOT NULL,
    ended_at REAL
);

CREATE TABLE experiments (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    wave_id INTEGER REFERENCES waves (id),
    patch_id INTEGER REFERENCES patches (id),  -- NULL for the A/A self-test
    kind TEXT NOT NULL DEFAULT 'candidate'
        CHECK (kind IN ('candidate', 'self_test', 'stack', 'ablation', 'final')),
    title TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued' CHECK (status IN (
        'queued', 'running', 'kept', 'discarded', 'inconclusive', 'checks_failed',
        'crashed', 'refused', 'cancelled', 'lost')),
    phase TEXT CHECK (phase IN ('setup', 'build', 'bench', 'checks')),
    reason TEXT,              -- crashed: build, benchmark, timeout, no_metric, does_not_apply; refused: path
    worker_id INTEGER REFERENCES workers (id),
    baseline_commit TEXT,
    candidate_commit TEXT,
    retry_of INTEGER REFERENCES experiments (id),
    log_dir TEXT,
    batches INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    meta TEXT,                -- JSON (e.g. which winners a stack/ablation contains)
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL
);
CREATE INDEX experiments_run ON experiments (run_id, status);
CREATE INDEX experiments_patch ON experiments (patch_id);

CREATE TABLE samples (
    id INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    pair INTEGER NOT NULL,    -- pair number within the experiment, from 0
    side TEXT NOT NULL CHECK (side IN ('A', 'B')),  -- A = baseline, B = candidate
    metric TEXT NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,  -- sample order within one invocation
    value REAL NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (experiment_id, pair, side, metric, seq)
);

CREATE TABLE decisions (
    id INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    verdict TEXT NOT NULL CHECK (verdict IN ('keep', 'discard', 'inconclusive', 'continue')),
    metric TEXT NOT NULL,
    effect REAL,
    ci_low REAL,
    ci_high REAL,
    pairs INTEGER NOT NULL,
    p_value REAL,
    q_value REAL,
    noise REAL,
    reason TEXT,
    policy TEXT,              -- JSON of the policy that decided
    metrics TEXT,             -- JSON: per-metric medians and effects
    is_final INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX decisions_experiment ON decisions (experiment_id, id);

CREATE TABLE winners (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    experiment_id INTEGER NOT NULL UNIQUE REFERENCES experiments (id),
    commit_sha TEXT NOT NULL,
    patch_file TEXT,
    position INTEGER NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY,
    purpose TEXT NOT NULL,    -- research, patch, reflect, queries
    model TEXT NOT NULL,
    api_base TEXT,
    prompt TEXT NOT NULL,     -- JSON list of messages
    response TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cost_usd REAL,
    duration_ms INTEGER,
    attempt INTEGER NOT NULL DEFAULT 1,
    error TEXT,
    run_id INTEGER REFERENCES runs (id),
    hypothesis_id INTEGER REFERENCES hypotheses (id),
    created_at REAL NOT NULL
);

CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    level TEXT NOT NULL CHECK (level IN ('debug', 'info', 'warning', 'error')),
    kind TEXT NOT NULL,
    run_id INTEGER,
    experiment_id INTEGER,
    message TEXT NOT NULL,
    data TEXT
);
CREATE INDEX events_run ON events (run_id, id);

CREATE TABLE commands (
    -- steering: the TUI and CLI write, the runner executes and marks done
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN (
        'approve', 'reject', 'prioritize', 'pause', 'resume', 'stop', 'cancel')),
    target_kind TEXT CHECK (target_kind IN ('hypothesis', 'experiment', 'run')),
    target_id INTEGER,
    args TEXT,                -- JSON
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    result TEXT,
    created_at REAL NOT NULL,
    handled_at REAL
);
CREATE INDEX commands_pending ON commands (status, id)
""",
    )


@migration
def m002_search(db: sqlite_utils.Database) -> None:
    """Full-text search over all evidence (papers, commits, fusions, notes), kept in sync by triggers.

    unicode61 with `_` as a token character keeps code identifiers (`ggml_can_fuse`) whole and
    matches any script (Cyrillic included); remove_diacritics folds accents.
    """
    _sql(
        db,
        """
CREATE VIRTUAL TABLE evidence_fts USING fts5 (
    title, section, body,
    content = 'evidence', content_rowid = 'id',
    tokenize = "unicode61 remove_diacritics 2 tokenchars '_'"
);
CREATE TRIGGER evidence_ai AFTER INSERT ON evidence BEGIN
    INSERT INTO evidence_fts (rowid, title, section, body)
    VALUES (new.id, new.title, new.section, new.body);
END;
CREATE TRIGGER evidence_ad AFTER DELETE ON evidence BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, title, section, body)
    VALUES ('delete', old.id, old.title, old.section, old.body);
END;
CREATE TRIGGER evidence_au AFTER UPDATE ON evidence BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, title, section, body)
    VALUES ('delete', old.id, old.title, old.section, old.body);
    INSERT INTO evidence_fts (rowid, title, section, body)
    VALUES (new.id, new.title, new.section, new.body);
END;
INSERT INTO evidence_fts (evidence_fts) VALUES ('rebuild')
""",
    )


@migration
def m003_record_links(db: sqlite_utils.Database) -> None:
    """Links the history needs beyond patches: an experiment's hypothesis, a decision's origin.

    `experiments.hypothesis_id` lets imported experiments (which have no diff, so no patch row) point
    at their hypothesis; for others it is the patch's hypothesis, backfilled here.
    `decisions.origin` tells the runner's own decisions from re-analyses (`redecide --save`) and
    imported verdicts, so a re-analysis never masquerades as what the run decided.
    """
    _sql(
        db,
        """
ALTER TABLE experiments ADD COLUMN hypothesis_id INTEGER REFERENCES hypotheses (id);
UPDATE experiments
    SET hypothesis_id = (SELECT hypothesis_id FROM patches WHERE patches.id = experiments.patch_id)
    WHERE patch_id IS NOT NULL;
CREATE INDEX experiments_hypothesis ON experiments (hypothesis_id);
ALTER TABLE decisions ADD COLUMN origin TEXT NOT NULL DEFAULT 'runner'
    CHECK (origin IN ('runner', 'redecide', 'import'))
""",
    )


@migration
def m004_search_kind(db: sqlite_utils.Database) -> None:
    """Index evidence.kind in the full-text table so `kb search --kind` filters inside FTS5.

    Filtering by a join on evidence costs a row lookup per match (about 0.1 s for a common word over
    100,000 passages); as an indexed column, `kind : "commit"` is one more doclist to intersect.
    Searches restrict user terms to title, section and body, so the kind column never matches text.
    """
    _sql(
        db,
        """
DROP TRIGGER evidence_ai;
DROP TRIGGER evidence_ad;
DROP TRIGGER evidence_au;
DROP TABLE evidence_fts;
CREATE VIRTUAL TABLE evidence_fts USING fts5 (
    title, section, body, kind,
    content = 'evidence', content_rowid = 'id',
    tokenize = "unicode61 remove_diacritics 2 tokenchars '_'"
);
CREATE TRIGGER evidence_ai AFTER INSERT ON evidence BEGIN
    INSERT INTO evidence_fts (rowid, title, section, body, kind)
    VALUES (new.id, new.title, new.section, new.body, new.kind);
END;
CREATE TRIGGER evidence_ad AFTER DELETE ON evidence BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, title, section, body, kind)
    VALUES ('delete', old.id, old.title, old.section, old.body, old.kind);
END;
CREATE TRIGGER evidence_au AFTER UPDATE ON evidence BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, title, section, body, kind)
    VALUES ('delete', old.id, old.title, old.section, old.body, old.kind);
    INSERT INTO evidence_fts (rowid, title, section, body, kind)
    VALUES (new.id, new.title, new.section, new.body, new.kind);
END;
INSERT INTO evidence_fts (evidence_fts) VALUES ('rebuild')
""",
    )


@migration
def m005_runner_jobs(db: sqlite_utils.Database) -> None:
    """Batch jobs: one row per job a fleet runs for an experiment (a batch of A/B pairs).

    The row is written before the job is submitted and reaches a terminal status in the same
    transaction that records what the runner concluded from it, so a runner killed at any moment can
    reattach to live jobs (`backend_job_id`), re-read finished ones from `log_path` (samples are
    UNIQUE, so re-reading adds nothing twice) and never submit a batch twice. `nonce` authenticates
    the markers in the job's log; `parsed_lines` is how far warnings were already reported.
    """
    _sql(
        db,
        """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    experiment_id INTEGER NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    worker_id INTEGER REFERENCES workers (id),
    batch INTEGER NOT NULL,   -- 0, 1, ... within the experiment
    pair_start INTEGER NOT NULL,
    pairs INTEGER NOT NULL,
    run_checks INTEGER NOT NULL DEFAULT 0,
    nonce TEXT NOT NULL,
    backend TEXT NOT NULL,
    backend_job_id TEXT,      -- local: the job's pid (= its session id); skypilot: cluster job id
    status TEXT NOT NULL DEFAULT 'submitting' CHECK (status IN (
        'submitting', 'running', 'succeeded', 'failed', 'cancelled', 'lost')),
    exit_code INTEGER,
    detail TEXT,
    log_path TEXT NOT NULL,
    job_dir TEXT NOT NULL,
    parsed_lines INTEGER NOT NULL DEFAULT 0,
    deadline REAL,            -- wall-clock limit for the whole job (Unix seconds)
    submitted_at REAL NOT NULL,
    ended_at REAL,
    UNIQUE (experiment_id, batch)
);
CREATE INDEX jobs_run ON jobs (run_id, status)
""",
    )


@migration
@rebuilds_tables
def m006_fork_content(db: sqlite_utils.Database) -> None:
    """Forks found by content: file-level evidence, and what each fork commit touches and claims.

    - `evidence.kind` gains `fork_file`: a fork's version of one file against the baseline's, for
      forks with no usable fork point (the table is rebuilt, its ids and the full-text index kept);
    - `fork_files`: that comparison (status, blobs, counts, the diff capped like commit diffs);
    - `commits.backends`, `areas`, `claims`: JSON lists of the compute backends and the areas (docs,
      build, web, tests, ...) the commit's files belong to, and the speed-ups its message claims with
      the metric each names (`{"effect": 0.3, "metric": "pp", "text": ...}`). Filled when the fork is
      mined; rows mined before this migration are filled at the fork's next `kb add-fork`.
    """
    _sql(
        db,
        """
CREATE TABLE evidence_new (
    id INTEGER PRIMARY KEY,   -- the evidence id hypotheses cite
    source_id INTEGER NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    kind TEXT NOT NULL CHECK (kind IN ('passage', 'commit', 'fusion', 'gap', 'single_op', 'note',
                                       'fork_file')),
    ref TEXT NOT NULL,        -- stable key within the source: passage number, sha, fusion key, path
    title TEXT,               -- paper title, commit subject, fusion ops
    section TEXT,             -- heading a passage sits under; backend of a fusion; fork name
    position INTEGER,         -- passage order within the paper
    body TEXT NOT NULL DEFAULT '',
    meta TEXT,                -- JSON: file, line, present/missing backends, ...
    created_at REAL NOT NULL,
    UNIQUE (source_id, kind, ref)
);
INSERT INTO evidence_new (id, source_id, kind, ref, title, section, position, body, meta, created_at)
    SELECT id, source_id, kind, ref, title, section, position, body, meta, created_at FROM evidence;
DROP TABLE evidence;
ALTER TABLE evidence_new RENAME TO evidence;
CREATE INDEX evidence_kind ON evidence (kind);
CREATE TRIGGER evidence_ai AFTER INSERT ON evidence BEGIN
    INSERT INTO evidence_fts (rowid, title, section, body, kind)
    VALUES (new.id, new.title, new.section, new.body, new.kind);
END;
CREATE TRIGGER evidence_ad AFTER DELETE ON evidence BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, title, section, body, kind)
    VALUES ('delete', old.id, old.title, old.section, old.body, old.kind);
END;
CREATE TRIGGER evidence_au AFTER UPDATE ON evidence BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, title, section, body, kind)
    VALUES ('delete', old.id, old.title, old.section, old.body, old.kind);
    INSERT INTO evidence_fts (rowid, title, section, body, kind)
    VALUES (new.id, new.title, new.section, new.body, new.kind);
END;

CREATE TABLE fork_files (
    evidence_id INTEGER PRIMARY KEY REFERENCES evidence (id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('modified', 'added', 'deleted')),  -- added: only in the fork
    fork_commit TEXT NOT NULL,
    baseline_commit TEXT NOT NULL,
    fork_blob TEXT,
    baseline_blob TEXT,
    insertions INTEGER NOT NULL DEFAULT 0,
    deletions INTEGER NOT NULL DEFAULT 0,
    binary INTEGER NOT NULL DEFAULT 0,
    backend TEXT,             -- the compute backend the file belongs to, if any
    diff TEXT,                -- baseline's version -> the fork's, capped per file
    diff_truncated INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX fork_files_path ON fork_files (path);

-- JSON lists: compute backends (cpu, cuda, ...); areas (backend, core, model, docs, build, web, ...);
-- claimed speed-ups ({effect, metric, text, how})
ALTER TABLE commits ADD COLUMN backends TEXT;
ALTER TABLE commits ADD COLUMN areas TEXT;
ALTER TABLE commits ADD COLUMN claims TEXT
""",
    )


@migration
def m007_search_stems(db: sqlite_utils.Database) -> None:
    """A second full-text index that forgives word forms, searched after the exact one.

    The porter tokenizer over unicode61 without `_` as a token character: English words are indexed
    by their stems (`repacked`, `repacking` -> `repack`) and code identifiers by their parts
    (`ggml_compute_forward_rms_norm` -> ggml compute forward rms norm), so a part or a word form is
    found; Russian words are kept whole and matched by their snowball stem as a prefix at query time.
    Same external content and kind column as evidence_fts, kept in sync by its own triggers.
    """
    _sql(
        db,
        """
CREATE VIRTUAL TABLE evidence_stem_fts USING fts5 (
    title, section, body, kind,
    content = 'evidence', content_rowid = 'id',
    tokenize = "porter unicode61 remove_diacritics 2"
);
CREATE TRIGGER evidence_stem_ai AFTER INSERT ON evidence BEGIN
    INSERT INTO evidence_stem_fts (rowid, title, section, body, kind)
    VALUES (new.id, new.title, new.section, new.body, new.kind);
END;
CREATE TRIGGER evidence_stem_ad AFTER DELETE ON evidence BEGIN
    INSERT INTO evidence_stem_fts (evidence_stem_fts, rowid, title, section, body, kind)
    VALUES ('delete', old.id, old.title, old.section, old.body, old.kind);
END;
CREATE TRIGGER evidence_stem_au AFTER UPDATE ON evidence BEGIN
    INSERT INTO evidence_stem_fts (evidence_stem_fts, rowid, title, section, body, kind)
    VALUES ('delete', old.id, old.title, old.section, old.body, old.kind);
    INSERT INTO evidence_stem_fts (rowid, title, section, body, kind)
    VALUES (new.id, new.title, new.section, new.body, new.kind);
END;
INSERT INTO evidence_stem_fts (evidence_stem_fts) VALUES ('rebuild')
""",
    )


@migration
@rebuilds_tables
def m008_hypothesis_queue(db: sqlite_utils.Database) -> None:
    """A queue a person can work at thousands of hypotheses: rank, families, ports, a profile.

    - `hypotheses.status` gains `needs_port`: a fork commit that conflicts with the baseline even
      with a three-way merge waits there for the patch writer (the table is rebuilt, ids kept);
    - `rank` (relevance to the target, 0-100, NULL until ranked) and `rank_why` (JSON: its
      components and what they were computed from), set by runner/rank.py;
    - `family`: the id of the first hypothesis of a series of fork commits on the same functions or
      files (NULL for one alone); the family's best member runs first, the others wait behind it;
    - `priority_set`: 1 once a person set the priority (`hypotheses prioritize`, the TUI's +/-),
      which then orders the queue before the rank;
    - `baseline_profiles`: the `PROFILE <symbol>=<share>` lines the benchmark printed on a baseline.
    """
    _sql(
        db,
        """
CREATE TABLE hypotheses_new (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    rationale TEXT NOT NULL DEFAULT '',
    expected_effect REAL,     -- relative improvement of the primary metric, 0.03 = +3%
    risk TEXT,
    confidence REAL,
    cost REAL,
    priority REAL NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'proposed'
        CHECK (status IN ('proposed', 'approved', 'rejected', 'patched', 'unpatchable', 'needs_port')),
    origin TEXT NOT NULL DEFAULT 'manual',  -- manual, miner:gap, miner:fork, llm, import
    dedupe_key TEXT,          -- miners: idempotence key
    llm_call_id INTEGER REFERENCES llm_calls (id),
    notes TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    rank REAL,                -- relevance to the target, 0-100 (runner/rank.py); NULL until ranked
    rank_why TEXT,            -- JSON: the rank's components, backends, functions
    family INTEGER,           -- id of the first hypothesis of its family of fork commits; NULL alone
    priority_set INTEGER NOT NULL DEFAULT 0  -- 1: a person set the priority; it orders before rank
);
INSERT INTO hypotheses_new (id, title, rationale, expected_effect, risk, confidence, cost, priority,
                            status, origin, dedupe_key, llm_call_id, notes, created_at, updated_at)
    SELECT id, title, rationale, expected_effect, risk, confidence, cost, priority, status, origin,
           dedupe_key, llm_call_id, notes, created_at, updated_at FROM hypotheses;
DROP TABLE hypotheses;
ALTER TABLE hypotheses_new RENAME TO hypotheses;
CREATE UNIQUE INDEX hypotheses_dedupe ON hypotheses (dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX hypotheses_status ON hypotheses (status, priority);
CREATE INDEX hypotheses_rank ON hypotheses (rank);
CREATE INDEX hypotheses_family ON hypotheses (family, rank) WHERE family IS NOT NULL;

CREATE TABLE baseline_profiles (
    baseline_commit TEXT NOT NULL,
    symbol TEXT NOT NULL,     -- as the benchmark printed it (PROFILE <symbol>=<share>)
    share REAL NOT NULL,      -- median share of the profile across the calls, 0-1
    calls INTEGER NOT NULL,   -- benchmark calls that printed it
    source TEXT NOT NULL,     -- validate, self_test, ...
    created_at REAL NOT NULL,
    PRIMARY KEY (baseline_commit, symbol)
)
""",
    )


@migration
@rebuilds_tables
def m009_experiment_statuses(db: sqlite_utils.Database) -> None:
    """Experiment statuses as DESIGN.md has them: an A/A self-test ends `passed` or `failed` (it was
    stored as `inconclusive` / `discarded`, a candidate's words, and shown as "passed" elsewhere),
    and `conflict` (a candidate that no longer applies after an earlier winner, even three-way).

    The table is rebuilt from its own current definition with the CHECK widened (ids, columns added
    by earlier migrations, indexes and triggers kept), then the old A/A rows are renamed."""
    old = "'crashed', 'refused', 'cancelled', 'lost'))"
    _rebuild_from_own_sql(
        db,
        "experiments",
        lambda sql: sql.replace(
            old, "'crashed', 'conflict', 'refused', 'cancelled', 'lost',\n        'passed', 'failed'))"
        ),
    )
    db.execute(
        "UPDATE experiments SET status = CASE WHEN json_extract(meta, '$.self_test.passed') THEN 'passed' "
        "ELSE 'failed' END WHERE kind = 'self_test' AND status IN ('inconclusive', 'discarded')"
    )


@migration
def m010_autopilot(db: sqlite_utils.Database) -> None:
    """The autonomous loop (issue 15):

    - `runs.stop_reason` (one token, DESIGN.md), `runs.phase` (researching, patching, measuring,
      reflecting) and `runs.steering` (JSON: the focus and avoid notes, the approval switch).
    - `patches.repair_of` (the attempt it repairs), `patches.from_experiment` (the experiment whose
      failure or conflict it answers), `patches.base_commit` (the baseline it was written against,
      for the three-way rebase) and `patches.norm_sha` (the diff normalised, for novelty).
    - `hypotheses.repeat_of` (an idea already measured here) and `hypotheses.wave_id` (the wave
      whose post-mortem the research phase read when it proposed this one).
    - `llm_calls.step` (a research phase's step key: a resumed run reuses a stored answer).
    - `commands.kind` gains `focus`, `avoid`, `approval`, `budget` (`autoresearch steer`).

    Finished runs get a stop_reason from the words their summary stored (`stopped_by`)."""
    _sql(
        db,
        """
ALTER TABLE runs ADD COLUMN stop_reason TEXT CHECK (stop_reason IS NULL OR stop_reason IN (
    'queue_empty', 'budget_usd', 'budget_minutes', 'waves', 'max_experiments', 'plateau',
    'no_hypotheses', 'user'));
ALTER TABLE runs ADD COLUMN phase TEXT;
ALTER TABLE runs ADD COLUMN steering TEXT;
ALTER TABLE patches ADD COLUMN repair_of INTEGER REFERENCES patches (id);
ALTER TABLE patches ADD COLUMN from_experiment INTEGER REFERENCES experiments (id);
ALTER TABLE patches ADD COLUMN base_commit TEXT;
ALTER TABLE patches ADD COLUMN norm_sha TEXT;
CREATE INDEX patches_norm ON patches (norm_sha);
ALTER TABLE hypotheses ADD COLUMN repeat_of INTEGER REFERENCES hypotheses (id);
ALTER TABLE hypotheses ADD COLUMN wave_id INTEGER REFERENCES waves (id);
ALTER TABLE llm_calls ADD COLUMN step TEXT;
CREATE INDEX llm_calls_step ON llm_calls (step) WHERE step IS NOT NULL
""",
    )
    old = "'approve', 'reject', 'prioritize', 'pause', 'resume', 'stop', 'cancel'))"
    _rebuild_from_own_sql(
        db,
        "commands",
        lambda sql: sql.replace(
            old,
            "'approve', 'reject', 'prioritize', 'pause', 'resume', 'stop', 'cancel',\n"
            "        'focus', 'avoid', 'approval', 'budget'))",
        ),
    )
    from kb.patchnorm import normalized_sha

    for row in db.execute("SELECT id, diff FROM patches").fetchall():
        db.execute("UPDATE patches SET norm_sha = ? WHERE id = ?", [normalized_sha(row[1]), row[0]])
    db.execute(
        "UPDATE runs SET stop_reason = CASE "
        "WHEN json_extract(summary, '$.stopped_by') = 'queue empty' THEN 'queue_empty' "
        "WHEN json_extract(summary, '$.stopped_by') = 'stopped' THEN 'user' "
        "WHEN json_extract(summary, '$.stopped_by') LIKE 'waves:%' THEN 'waves' "
        "WHEN json_extract(summary, '$.stopped_by') LIKE 'budget: max experiments%' THEN 'max_experiments' "
        "WHEN json_extract(summary, '$.stopped_by') LIKE 'budget: $%' THEN 'budget_usd' "
        "WHEN json_extract(summary, '$.stopped_by') LIKE 'budget: %minutes' THEN 'budget_minutes' "
        "END WHERE status = 'finished' AND imported_from IS NULL"
    )


@migration
def m011_decision_family(db: sqlite_utils.Database) -> None:
    """`decisions.family` (JSON, {experiment id: pairs}): the wave-mates a look of the loop judged
    together and how many pairs each had then, so that `redecide --check` replays every stored
    decision exactly (the same judge on the same inputs). Decisions recorded before have none."""
    db.execute("ALTER TABLE decisions ADD COLUMN family TEXT")


def _rebuild_from_own_sql(db: sqlite_utils.Database, table: str, edit: Callable[[str], str]) -> None:
    """SQLite's 12-step table change for a constraint: the new table from the old one's stored SQL
    as `edit` changes it, rows copied by column name, its indexes and triggers made again."""
    sql = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchone()[0]
    changed = edit(sql)
    if changed == sql:
        raise RuntimeError(f"rebuilding {table}: its definition is not the one this migration expects")
    head = f"CREATE TABLE {table} ("
    if not changed.startswith(head):
        raise RuntimeError(f"rebuilding {table}: unexpected definition start {changed[:40]!r}")
    others = [
        r[0]
        for r in db.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') "
            "AND sql IS NOT NULL",
            [table],
        ).fetchall()
    ]
    columns = ", ".join(f'"{r[1]}"' for r in db.execute(f"PRAGMA table_info({table})").fetchall())
    db.execute(f"CREATE TABLE {table}_new (" + changed[len(head) :])
    db.execute(f"INSERT INTO {table}_new ({columns}) SELECT {columns} FROM {table}")
    db.execute(f"DROP TABLE {table}")
    db.execute(f"ALTER TABLE {table}_new RENAME TO {table}")
    for statement in others:
        db.execute(statement)


def applied(db: sqlite_utils.Database) -> set[str]:
    if "_migrations" not in db.table_names():
        return set()
    return {row[0] for row in db.execute("SELECT name FROM _migrations").fetchall()}


def migrate(db: sqlite_utils.Database, *, upto: str | None = None) -> list[str]:
    """Apply pending migrations in order, each in its own transaction; return the names applied.

    `upto` stops after the named migration (tests use it to build an older schema).
    """
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    done = applied(db)
    ran: list[str] = []
    for fn in MIGRATIONS:
        name = fn.__name__
        if name not in done and _apply(db, fn):
            ran.append(name)
        if upto is not None and name == upto:
            break
    return ran


def _apply(db: sqlite_utils.Database, fn: Migration) -> bool:
    """Run one migration in its own transaction; False when another process already ran it."""
    name = fn.__name__
    # PRAGMA foreign_keys is a no-op inside a transaction: switch it before BEGIN.
    keys_on = bool(db.execute("PRAGMA foreign_keys").fetchone()[0])
    rebuild = name in REBUILDS and keys_on
    if rebuild:
        db.execute("PRAGMA foreign_keys = OFF")
    try:
        with transaction(db):
            # Re-check under the write lock: another process may have just migrated.
            if db.execute("SELECT 1 FROM _migrations WHERE name = ?", [name]).fetchone():
                return False
            fn(db)
            if rebuild:
                broken = db.execute("PRAGMA foreign_key_check").fetchone()
                if broken is not None:
                    raise RuntimeError(f"{name}: leaves a broken reference in {broken[0]} (row {broken[1]})")
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", [name, now()])
    finally:
        if rebuild:
            db.execute("PRAGMA foreign_keys = ON")
    return True
