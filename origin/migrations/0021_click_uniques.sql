-- Protocol 3.7 (issue 27): unique visitors per link key and UTC day, a
-- HyperLogLog sketch in the text of a batch's `u` line (`s <hex visitors>`
-- while at most 256, exact; `d <16,384 registers>`), merged from every
-- version 4 batch (`clicks::apply`). No address or user agent: 64-bit keyed
-- hashes whose daily salt is gone an hour after the day
-- (docs/architecture.md, "Unique visitors"). Kept like the daily device
-- rows. Safe to run again.
CREATE TABLE IF NOT EXISTS click_day_uniques (
  code   VARCHAR(287) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  day    INT UNSIGNED NOT NULL,
  sketch MEDIUMTEXT   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (code, day)
) ENGINE=InnoDB;
