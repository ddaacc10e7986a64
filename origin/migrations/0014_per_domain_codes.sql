-- Protocol 3.6 (issue 25): custom codes are unique per domain. A code of
-- the pre-generated grammar (exactly 6 alphanumerics) stays one link in the
-- whole fleet; any other code is one link per domain. `code_scope` is ''
-- for the first kind and the domain for the second, and the unique key is
-- (code, code_scope). `link_key` is the link's name in every table keyed
-- by link (the code, or `<domain>/<code>`; `shorturl_common::code::link_key`).
ALTER TABLE short_code
  ADD COLUMN IF NOT EXISTS code_scope VARCHAR(253) CHARACTER SET ascii COLLATE ascii_bin
    AS (IF(CHAR_LENGTH(code) = 6 AND LOCATE('_', code) = 0 AND LOCATE('-', code) = 0,
           '', LOWER(COALESCE(domain, '')))) STORED,
  ADD COLUMN IF NOT EXISTS link_key VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin
    AS (IF(code_scope = '', code, CONCAT(code_scope, '/', code))) VIRTUAL;

ALTER TABLE short_code DROP INDEX IF EXISTS uk_code, ADD UNIQUE KEY uk_code (code, code_scope);

-- Tables keyed by link name it by its link key: a per-domain code's rows
-- move from `<code>` to `<domain>/<code>` (until now every code had one
-- row, so the join below is unambiguous; run again, it finds nothing).
ALTER TABLE click_hour MODIFY code VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
ALTER TABLE click_day_referrer MODIFY code VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
ALTER TABLE click_day_device MODIFY code VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
ALTER TABLE click_day_destination MODIFY code VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
ALTER TABLE link_audit MODIFY code VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
ALTER TABLE custom_code_dir MODIFY code VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;

UPDATE click_hour c JOIN short_code s ON s.code = c.code AND s.code_scope <> ''
  SET c.code = s.link_key;
UPDATE click_day_referrer c JOIN short_code s ON s.code = c.code AND s.code_scope <> ''
  SET c.code = s.link_key;
UPDATE click_day_device c JOIN short_code s ON s.code = c.code AND s.code_scope <> ''
  SET c.code = s.link_key;
UPDATE click_day_destination c JOIN short_code s ON s.code = c.code AND s.code_scope <> ''
  SET c.code = s.link_key;
UPDATE link_audit c JOIN short_code s ON s.code = c.code AND s.code_scope <> ''
  SET c.code = s.link_key;
