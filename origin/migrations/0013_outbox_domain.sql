-- Protocol 3.5 (issue 25): records are keyed by (domain, code). An outbox
-- row names the domain whose key the change is about when the code's row
-- may no longer say it (a recycled code's free row has no domain, but the
-- old link's key must still get its negative and its message). NULL: the
-- row's current domain (rows written before this migration).
ALTER TABLE outbox
  ADD COLUMN IF NOT EXISTS domain VARCHAR(253) CHARACTER SET ascii COLLATE ascii_general_ci NULL;
