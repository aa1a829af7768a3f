// Translation unit that owns the shared precompiled header (see core/CMakeLists.txt).
