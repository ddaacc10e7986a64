-- Issue 10: indexes for GET /api/v1/links (search and list). Every answer
-- is ordered by (created_at DESC, id DESC) and paged by keyset on that pair;
-- InnoDB appends the primary key (id) to every secondary index, so each
-- index below is really (<filter>, created_at, id): an equality on the
-- filter plus a range of created_at (a page boundary, created_from/to) is
-- one index range read in the answer's order, with no sort.
--
--   idx_created         no filter (admin list), created_from/created_to only
--   idx_domain_created  domain =
--   idx_app_created     app = (also every caller that is neither admin nor merchant-bound)
--   idx_kdt_created     kdt_id = (also merchant-bound callers, one range per merchant)
--   idx_state_created   state = (active/expired add an expires_at test on the rows read)
--   idx_url_created     long_url = (a range of the 255-byte prefix) and long_url LIKE 'prefix%'
--   uk_code             code = (one row)
--
-- The search statement names the indexes of its filters (FORCE INDEX,
-- store/search.rs), so the names below are part of the code: rename both.
-- Free pre-generated rows have NULL created_at, domain, app, kdt_id and
-- long_url: they sit at one end of each index and no search reads them.
-- Adding secondary indexes is an online operation in MariaDB 10.11 (reads
-- and writes continue while they are built).
ALTER TABLE short_code
  ADD INDEX IF NOT EXISTS idx_created (created_at),
  ADD INDEX IF NOT EXISTS idx_domain_created (domain, created_at),
  ADD INDEX IF NOT EXISTS idx_app_created (app, created_at),
  ADD INDEX IF NOT EXISTS idx_kdt_created (kdt_id, created_at),
  ADD INDEX IF NOT EXISTS idx_state_created (state, created_at),
  ADD INDEX IF NOT EXISTS idx_url_created (long_url(255), created_at);
