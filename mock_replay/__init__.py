"""History replay: existing rows in primary-key batches, published as SimpleBinlog MOCK events."""
