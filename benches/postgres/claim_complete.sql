-- One new key per transaction of pgbench: claim it, then complete it, each
-- statement in autocommit (two commits, as idemkit's adapter does: a claim must
-- be durable before the work runs, and the completion after). See run.sh.
\set r random(1, 9223372036854775806)
INSERT INTO idempotency_keys (key, fingerprint, state, locked_until)
  VALUES ('c' || :client_id || '-' || :r, '\x784313e595fa18fd007f04fa46a87d15d51de92fea1a7802e732b89ee15739a2'::bytea,
          'running', now() + interval '30 seconds')
  ON CONFLICT DO NOTHING RETURNING key AS claimed \gset
UPDATE idempotency_keys
  SET state = 'completed', locked_until = NULL, response_status = 201,
      response = '\x7b226964223a22617070745f303030303031222c22737461747573223a22636f6e6669726d6564227d'::bytea,
      updated_at = now()
  WHERE key = :claimed AND state = 'running';
