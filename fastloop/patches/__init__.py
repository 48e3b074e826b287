"""The patch records, one module each, registered in default-set order.

``register_lazy`` names a patch and its target without importing its
module, which loads when the target module is imported (start-up pays for
no patch whose target the application never imports).
"""

from fastloop._registry import register_lazy

register_lazy("add_callback", "tornado.platform.asyncio", f"{__name__}.add_callback")
register_lazy("wakeup", "asyncio.selector_events", f"{__name__}.wakeup")
register_lazy("write_to_fd", "tornado.iostream", f"{__name__}.write_to_fd")
register_lazy("poll", "asyncio.selector_events", f"{__name__}.poll")
register_lazy("switchinterval", "sys", f"{__name__}.switchinterval", default=False)
