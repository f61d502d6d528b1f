package io.cdcmirror.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's default {@code file:} filesystem (checksum files included) over
 * {@link NioRawLocalFileSystem}: the same files, without a {@code chmod} child process per
 * file and directory. Selected with {@code fs.file.impl}; other schemes are untouched.
 */
public class NioLocalFileSystem extends LocalFileSystem {

  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
