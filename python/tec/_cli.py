"""The `tec` command a wheel installs: the tec executable shipped in the package (tec/bin/tec), with the
arguments as given."""
import os
import sys


def main() -> None:
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tec")
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
