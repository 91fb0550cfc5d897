"""profkit's version, in a module of its own: the package root re-exports it, and the modules that
write it into reports and run folders import it from here, so none of them imports the root (whose
lazy ``profkit.open`` leads back up to the API)."""

__version__ = "0.1.0"
