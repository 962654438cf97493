# Copies libpg_query's pg_query.proto (IN) to OUT with "option optimize_for = CODE_SIZE;" after
# its package line: same messages and API, a generated .cc a third of the size.
file(READ "${IN}" proto)
string(REGEX REPLACE "(\npackage [^;]+;)" "\\1\noption optimize_for = CODE_SIZE;" proto "${proto}")
if(NOT proto MATCHES "optimize_for = CODE_SIZE")
  message(FATAL_ERROR "no package line in ${IN}")
endif()
file(WRITE "${OUT}" "${proto}")
