-- Protocol 3.7 (issue 27): human clicks per link key, UTC day and value of
-- a dimension (`country`, `browser`, `os`, `lang`, `source`, `utm_source`,
-- `utm_medium`, `utm_campaign`), filled from click batches of format
-- version 4 (docs/protocol.md, "Click batches"): the values the `x` lines
-- name and, per link-day, each dimension's default (the day's human clicks
-- the lines leave out). At most 20 named values and `~other` per
-- link-day-dimension besides the default (`clicks::apply`). Values are
-- ASCII (ISO country codes, family names, language subtags, UTM values of
-- `[A-Za-z0-9._~%+-]`). Kept like the daily device rows (not pruned). Safe
-- to run again.
CREATE TABLE IF NOT EXISTS click_day_dim (
  code  VARCHAR(287)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  day   INT UNSIGNED    NOT NULL,
  dim   VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  value VARCHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  n     BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (code, day, dim, value)
) ENGINE=InnoDB;
