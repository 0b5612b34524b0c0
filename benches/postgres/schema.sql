-- The table a team would hand-write for idempotency keys (benches/postgres/run.sh).
SET client_min_messages = warning;
DROP TABLE IF EXISTS idempotency_keys;
CREATE TABLE idempotency_keys (
    key             text        PRIMARY KEY,
    fingerprint     bytea       NOT NULL,
    state           text        NOT NULL CHECK (state IN ('running', 'completed')),
    locked_until    timestamptz,
    response_status integer,
    response        bytea,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
