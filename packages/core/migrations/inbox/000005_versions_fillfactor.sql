-- inbox_versions is updated in place once per applied event (version,
-- applied_at; neither is indexed): free room on each page lets PostgreSQL make
-- those updates HOT (no new index entry, the old version pruned on the page),
-- as key_versions does on the producer side. Only pages written from now on
-- get the room. :SCHEMA is replaced by the quoted schema name.
ALTER TABLE :SCHEMA.inbox_versions SET (fillfactor = 70);
