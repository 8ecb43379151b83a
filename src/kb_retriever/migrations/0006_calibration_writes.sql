-- The chunks written to a project (added, replaced or deleted) since its trust channels were
-- last calibrated (calibrate.py): a write recalibrates only when they reach a tenth of the
-- project, so adding documents one at a time does not run the probes on every call.
ALTER TABLE kb_scope_stats ADD COLUMN IF NOT EXISTS writes_since_calibration bigint NOT NULL DEFAULT 0;
