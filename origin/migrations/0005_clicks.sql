-- Click analytics (issue 12): rollups the origins fill from the edges'
-- batches on the Redis Stream `su:1:clicks` (docs/protocol.md, "Click
-- batches"). A batch's id is inserted in the same transaction as its
-- counts, so a batch delivered twice is applied once.
CREATE TABLE IF NOT EXISTS click_batches (
  id         VARCHAR(200)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  applied_at BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

-- Clicks per link and UTC hour (hour = its start, Unix seconds).
CREATE TABLE IF NOT EXISTS click_hour (
  code  VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  hour  INT UNSIGNED    NOT NULL,
  human BIGINT UNSIGNED NOT NULL DEFAULT 0,
  bot   BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (code, hour)
) ENGINE=InnoDB;

-- Clicks per link, UTC day and referrer host (`-` none, `~other` the hosts
-- past a batch's top 20 for that link-day).
CREATE TABLE IF NOT EXISTS click_day_referrer (
  code VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  day  INT UNSIGNED    NOT NULL,
  host VARCHAR(255)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  n    BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (code, day, host)
) ENGINE=InnoDB;

-- Clicks per link, UTC day and device class (mobile, desktop, tablet, bot, other).
CREATE TABLE IF NOT EXISTS click_day_device (
  code  VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  day   INT UNSIGNED    NOT NULL,
  class VARCHAR(8)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  n     BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (code, day, class)
) ENGINE=InnoDB;
