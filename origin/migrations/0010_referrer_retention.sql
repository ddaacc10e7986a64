-- Issue 23: referrer rows are pruned by retention too
-- (`clicks.retention_referrers_days`, default 400), oldest days first in
-- bounded batches, which needs an index on the day. Safe to run again;
-- ADD INDEX is online in MariaDB 10.11.
ALTER TABLE click_day_referrer ADD INDEX IF NOT EXISTS idx_day (day);
