-- Issue 16, MySQL shards by id range. Only the meta database (`mysql.url`)
-- uses this table; on a shard it stays empty.
-- custom_code_dir: where a custom code lives when its inverse-permutation id
-- is in no configured range (or the code has another length): code -> the
-- name of the shard that holds its `short_code` row. One row per such
-- custom code, looked up by primary key; small next to the shards (custom
-- codes are a small share of links) and partitionable by code hash later.
CREATE TABLE IF NOT EXISTS custom_code_dir (
  code       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  shard      VARCHAR(64) CHARACTER SET ascii NOT NULL,
  created_at BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (code)
) ENGINE=InnoDB;
