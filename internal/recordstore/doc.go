// Package recordstore keeps small records durably: one JSON file per
// record, <dir>/<id>.json, in one directory that is the source of truth,
// with an in-memory index that is only a cache of it. The pool keeps its
// volumes and its snapshots in two stores of this one kind.
//
// The discipline every record follows:
//
//   - a new or changed record is written to a temporary file beside it
//     (.tmp-<id>.json.<random>: two processes sharing the directory never
//     collide) and fsynced, so the rename that publishes it publishes
//     complete contents;
//   - a create publishes it with a rename that never replaces (the commit
//     point: a duplicate create finds the first one's record, Exists); a
//     change renames over the old record;
//   - then one fsync of the directory makes the rename durable, shared
//     with every operation on the directory waiting at the same time
//     (durable.DirSync), so a create costs one fsync of its file and a
//     share of one of the directory;
//   - a record carries a version and its own ID, checked at every read: a
//     record of another version is refused rather than misread after a
//     downgrade, one under another ID's name is refused too.
//
// Load, at open, fills the index from the directory and, when its caller
// holds the directory alone, removes the temporary records interrupted
// writes left (never published: garbage). On a directory several hosts
// share, no host ever holds it alone: each store tags its temporary
// records with its owner (Config.Owner) and repairs only its own. What
// else the directory holds (the pool's images, node markers) is returned
// to the caller, untouched: the store owns <id>.json and .tmp-<id>.json.*
// (.tmp-<id>@<owner>.json.*) only.
//
// It knows nothing of volumes, images, gRPC or CSI, and must not import
// pool, csi or any hostos package.
package recordstore
