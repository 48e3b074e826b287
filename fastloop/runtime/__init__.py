"""The plumbing that runs fastloop inside a host process.

Start-up and ``configure()`` (``bootstrap``, what the ``fastloop.pth`` line
calls), the post-import hook that applies patches when their target module
loads (``importhook``), fork and exit handling (``fork``, ``exit``), the
marks by which an observer recognises a patch's stand-in for a selector
(``waits``), where auto mode's controller sleeps and what wakes it
(``dormancy``), and the ``sitecustomize`` fallback that ``fastloop run`` puts on
``PYTHONPATH``.  This package imports nothing: each part loads when needed.
"""
