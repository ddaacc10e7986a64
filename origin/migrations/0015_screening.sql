-- Issue 26: destination screening (protocol 4.7). Safe to run again.
--
-- screen_domain: the policy's managed entries (the admin API and console),
-- read by every origin; only the meta database (`mysql.url`) uses it.
CREATE TABLE IF NOT EXISTS screen_domain (
  domain     VARCHAR(253) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL,
  action     VARCHAR(5)   CHARACTER SET ascii NOT NULL,
  note       VARCHAR(200) CHARACTER SET utf8mb4 NULL,
  created_by VARCHAR(64)  CHARACTER SET utf8mb4 NOT NULL,
  updated_at BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (domain)
) ENGINE=InnoDB;

-- The links whose record carries `w` (the options column's `o.w`): the
-- console lists them through this index; a virtual column, so adding it
-- rewrites no row, and every write of `options` keeps it right.
ALTER TABLE short_code
  ADD COLUMN IF NOT EXISTS screen VARCHAR(5) CHARACTER SET ascii
    AS (JSON_VALUE(options, '$.o.w')) VIRTUAL,
  ADD INDEX IF NOT EXISTS idx_screen (screen);
