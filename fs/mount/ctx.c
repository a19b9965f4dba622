/* ctx: set up and tear down the state of one mount. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctx.h"
#include "req.h"
#include "xattr.h"

/* Read-only archives never change under the mount: let the kernel keep
 * names and attributes for a day. */
#define TD_FS_RO_TIMEOUT 86400.0

int td_fs_init(td_fs *fs, td_archive *a, const char *archive_path, const td_conf *conf)
{
	memset(fs, 0, sizeof *fs);
	fs->a = a;
	if (conf)
		fs->conf = *conf;
	else
		td_conf_defaults(&fs->conf);
	pthread_mutex_init(&fs->tree.mu, NULL);
	pthread_mutex_init(&fs->files_mu, NULL);
	atomic_init(&fs->tree.done, 0);
	fs->nentries = td_archive_nentries(a);
	fs->archive_path = strdup(archive_path);
	if (!fs->archive_path)
		return -ENOMEM;
	/* statfs's size: the file's (td_archive_info would open every shard
	 * of a format 5 archive and walk the tree: not before the mount) */
	struct stat st;
	fs->archive_bytes = stat(archive_path, &st) == 0 ? (uint64_t)st.st_size : 0;
	fs->uid = getuid();
	fs->gid = getgid();
	fs->entry_timeout = TD_FS_RO_TIMEOUT;
	fs->attr_timeout = TD_FS_RO_TIMEOUT;
	return td_fs_xattr_init(fs);
}

void td_fs_fini(td_fs *fs)
{
	td_fs_files_free_all(fs);
	pthread_mutex_destroy(&fs->files_mu);
	td_fs_xattr_fini(fs);
	free(fs->mountpoint);
	free(fs->tree.words);
	free(fs->tree.subdirs);
	for (int c = 0; c < 3; c++)
		free(fs->tree.denied[c]);
	pthread_mutex_destroy(&fs->tree.mu);
	free(fs->archive_path);
	td_archive_close(fs->a);
	memset(fs, 0, sizeof *fs);
}
