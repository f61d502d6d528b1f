package io.cdcmirror.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local filesystem, setting permissions with {@code java.nio} in this process.
 *
 * <p>Without Hadoop's native library (PyPI's pyspark has none), {@link RawLocalFileSystem}
 * runs {@code chmod} in a child process for every file and directory it creates; no
 * configuration switch avoids it. A POSIX filesystem lets the JVM set the same mode bits
 * itself. The sticky bit, which {@code java.nio} cannot express, and filesystems without POSIX
 * attributes keep Hadoop's own way.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  @Override
  public void setPermission(Path path, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(path, permission);
      return;
    }
    java.nio.file.Path file = pathToFile(path).toPath();
    try {
      Files.setPosixFilePermissions(file, posix(permission));
    } catch (UnsupportedOperationException notPosix) {
      super.setPermission(path, permission);
    } catch (NoSuchFileException missing) {
      // Hadoop's callers expect this type for a missing file.
      throw new FileNotFoundException("File " + path + " does not exist");
    }
  }

  /** The POSIX permission set of Hadoop's user/group/other actions. */
  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    add(bits, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(bits, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(bits, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return bits;
  }

  private static void add(Set<PosixFilePermission> bits, FsAction action,
      PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      bits.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      bits.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      bits.add(execute);
    }
  }
}
