/* tar_input: build an archive from a tar stream (tadoc compress -o OUT -). */
#ifndef TD_CLI_TAR_INPUT_H
#define TD_CLI_TAR_INPUT_H

#include "td_build.h"

/* Read a tar archive (GNU, POSIX ustar or pax; plain or compressed with any
 * filter libarchive knows, e.g. gzip, xz, zstd) from descriptor fd, called
 * `name` in messages ("-" for standard input), and write it to out_path
 * atomically as td_compress_paths does. Entries keep their tar names, less
 * leading '/' and "./" and empty or "." components ("./" itself is the
 * root: `tar -C DIR -cf - .` gives the layout of compressing DIR);
 * directories, regular files and symlinks keep mode and mtime; a hard link
 * is stored as a regular file with its target's bytes. File data streams
 * through in chunks into the builder (opts: td_build.h; its tmp_dir
 * should be on out_path's file system): no file is held whole in memory,
 * except a hard link's target while the link is added.
 * Returns a td_err with the detail naming the problem: "NAME: not a tar
 * archive", "NAME: truncated tar archive at entry PATH", "NAME: entry
 * PATH: ..." (a '..' component, an unsupported type, a path added twice);
 * out_path is then not created. Not thread-safe (one call at a time per
 * fd). */
int td_cli_tar_compress(int fd, const char *name, const char *out_path, const td_build_opts *opts);

#endif
