# The core_purity test: the controller's pure core (bulwark_controller_policy)
# and the base it links (bulwark_base) call nothing that reads files, opens
# sockets, reads a clock or starts a thread. Run by CTest as
#   cmake -DNM=<nm> -DCORE=<core.a> -DBASE=<base.a> -P core_purity.cmake
# It lists the undefined symbols of the archives (what their objects call
# out to) and fails naming each forbidden one and the object that calls it.
# snprintf and string streams are text, not I/O, and stay allowed.
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST)

set(forbidden_c
  open open64 openat openat64 creat creat64 fopen fopen64 fdopen freopen fclose fread fwrite fflush fputs puts
  printf fprintf vfprintf read write pread pwrite lseek fsync fdatasync rename unlink mkdir opendir readdir stat
  fstat lstat socket connect bind listen accept accept4 send sendto recv recvfrom getaddrinfo poll epoll_wait select
  clock_gettime gettimeofday time clock nanosleep usleep sleep pthread_create pthread_join fork execv execvp
  kill waitpid getenv)
set(forbidden_cxx
  "std::chrono::_V2::system_clock::now" "std::chrono::_V2::steady_clock::now" "std::thread::"
  "std::basic_ifstream" "std::basic_ofstream" "std::basic_fstream" "std::basic_filebuf" "std::filesystem::"
  "std::cout" "std::cerr" "std::clog" "std::this_thread::")

set(LIBS ${CORE} ${BASE})
set(found "")
foreach(lib IN LISTS LIBS)
  execute_process(COMMAND ${NM} -A -u -C ${lib} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "core_purity: ${NM} could not read ${lib}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    # "<archive>:<object>:                 U <symbol>"
    if(NOT line MATCHES "^([^:]*):([^:]*):[ \t]+U (.*)$")
      continue()
    endif()
    set(object "${CMAKE_MATCH_2}")
    set(symbol "${CMAKE_MATCH_3}")
    string(REGEX REPLACE "@.*$" "" bare "${symbol}")
    if(bare IN_LIST forbidden_c)
      list(APPEND found "${object}: ${symbol}")
      continue()
    endif()
    foreach(prefix IN LISTS forbidden_cxx)
      string(FIND "${symbol}" "${prefix}" at)
      if(at EQUAL 0)
        list(APPEND found "${object}: ${symbol}")
        break()
      endif()
    endforeach()
  endforeach()
endforeach()

list(LENGTH found n)
if(n GREATER 0)
  list(JOIN found "\n  " shown)
  message(FATAL_ERROR "core_purity: the pure core calls ${n} I/O, clock or thread function(s):\n  ${shown}\n"
                      "Time comes in as `now`; files, sockets and threads belong in src/plane or src/agent.")
endif()
message(STATUS "core_purity: ${LIBS}: no file, socket, clock or thread symbols")
