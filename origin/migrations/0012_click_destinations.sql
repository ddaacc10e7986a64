-- Issue 25: human clicks per link, UTC day and destination of a link with
-- options (`link`, `r<rule>`, `r<rule>v<variant>`, `expired`): the A/B
-- result, filled from click batches of format version 2 (docs/protocol.md,
-- "Click batches"). Kept like the daily device rows (not pruned). Safe to
-- run again.
CREATE TABLE IF NOT EXISTS click_day_destination (
  code VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  day  INT UNSIGNED    NOT NULL,
  dest VARCHAR(8)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  n    BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (code, day, dest)
) ENGINE=InnoDB;
