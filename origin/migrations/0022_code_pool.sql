-- Issue 30 (item 2): free codes get their own narrow table. A free code
-- used to be a row of `short_code` with NULL in every link column, and was
-- written into all ten of its secondary indexes twice: once by
-- pre-generation, once more when a creation filled it in. Now
-- pre-generation (and recycling) writes `(id, code, version)` here, through
-- the primary key and `uk_code` only, and a creation moves the row: it
-- deletes it here and inserts the link into `short_code` in the same
-- transaction (`store::batch`, `store::custom`). `version` is the free
-- code's: 0 when never issued, above its old link's when recycled.
-- Moving the free rows of an existing installation is one INSERT and one
-- DELETE over them; safe to run again.
CREATE TABLE IF NOT EXISTS code_pool (
  id      BIGINT UNSIGNED NOT NULL,
  code    VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  version BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  UNIQUE KEY uk_code (code)
) ENGINE=InnoDB;
INSERT IGNORE INTO code_pool (id, code, version)
  SELECT id, code, version FROM short_code WHERE state = 0;
DELETE FROM short_code WHERE state = 0;
