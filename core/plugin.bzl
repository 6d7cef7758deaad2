"""vision_plugin: the one way to build a plugin library.

A plugin's object file is referenced by nothing but its static registration, so without
alwayslink the linker drops it and the plugin silently vanishes from the registry.
"""

def vision_plugin(name, srcs = [], hdrs = [], deps = [], **kwargs):
    if "alwayslink" in kwargs:
        fail("vision_plugin sets alwayslink = 1 itself; remove it from %s" % name)
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["//core:plugin"],
        alwayslink = 1,
        **kwargs
    )
