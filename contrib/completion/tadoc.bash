# bash completion for tadoc(1). Install as
#   /usr/share/bash-completion/completions/tadoc
# or source it from ~/.bashrc.

# Complete paths inside the archive $1, one component at a time.
_tadoc_archive_paths()
{
    local archive=$1 cur=$2
    archive=${archive/#\~/$HOME}
    [[ -f $archive ]] || return
    local IFS=$'\n'
    # Offer the next component only; a directory shows as "dir/" alone.
    COMPREPLY=($(tadoc ls -- "$archive" 2>/dev/null | awk -v p="$cur" '
        index($0, p) == 1 {
            rest = substr($0, length(p) + 1)
            i = index(rest, "/")
            out = (i > 0) ? p substr(rest, 1, i) : $0
            if (!(out in seen)) { seen[out] = 1; order[n++] = out }
        }
        END { for (k = 0; k < n; k++) if (!((order[k] "/") in seen)) print order[k] }'))
    local k
    for k in "${!COMPREPLY[@]}"; do
        printf -v "COMPREPLY[k]" '%q' "${COMPREPLY[k]}"
    done
    if [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == */ ]]; then
        compopt -o nospace 2>/dev/null
    fi
}

_tadoc_archives()
{
    _filedir 'tadoc' 2>/dev/null || COMPREPLY=($(compgen -f -- "$1"))
}

_tadoc()
{
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    local commands="compress ls cat extract unpack count search top vector files ngrams fuzzy info verify mount config insert delete compact add help"
    if [[ $cword -eq 1 ]]; then
        COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur"))
        return
    fi
    local cmd=${words[1]}

    # Positional arguments before the cursor (options and their values skipped).
    local -a pos=()
    local i w skip=0 dashdash=0
    for ((i = 2; i < cword; i++)); do
        w=${words[i]}
        if ((skip)); then skip=0; continue; fi
        if ((!dashdash)); then
            case $w in
                --) dashdash=1; continue ;;
                -o|--output|-c|--config|--max-depth|--sample-shift|--format|-n|-k|--top|-j|--jobs|--shard-size|--memory|--to|--gpu) skip=1; continue ;;
                -*) continue ;;
            esac
        fi
        pos+=("$w")
    done
    local n=${#pos[@]}

    if [[ $cur == -* && $dashdash -eq 0 ]]; then
        local opts="-h --help"
        case $cmd in
            # '-': a tar archive on standard input, as the only input
            compress) opts+=" - -o --output -q --quiet -j --jobs --shard-size --memory --max-depth --sample-shift --format --gpu --fuzzy-index" ;;
            compact) opts+=" --format --full -j --jobs --shard-size --memory --gpu" ;;
            add) opts+=" --to -j --jobs --shard-size --memory --gpu" ;;
            ls) opts+=" -l --long" ;;
            mount) opts+=" -o -f -d" ;;
            config) opts+=" -p --print -c --config -o" ;;
            top) opts+=" -n" ;;
            files) opts+=" -n -f --gpu" ;;
            ngrams) opts+=" -n --top" ;;
            fuzzy) opts+=" -k -f --gpu" ;;
        esac
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi

    case $cmd in
        help)
            [[ $n -eq 0 ]] && COMPREPLY=($(compgen -W "$commands" -- "$cur"))
            ;;
        compress)
            case $prev in
                -o|--output) _tadoc_archives "$cur" ;;
                --max-depth|--sample-shift) ;;
                --format) COMPREPLY=($(compgen -W "5 4 3" -- "$cur")) ;;
                --gpu) COMPREPLY=($(compgen -W "auto on off" -- "$cur")) ;;
                -j|--jobs|--shard-size|--memory) ;;
                *) _filedir 2>/dev/null || COMPREPLY=($(compgen -f -- "$cur")) ;;
            esac
            ;;
        insert|delete)
            # FILE on a writable mount, then numbers / text.
            [[ $n -eq 0 ]] && { _filedir 2>/dev/null || COMPREPLY=($(compgen -f -- "$cur")); }
            ;;
        add)
            case $prev in
                --gpu) COMPREPLY=($(compgen -W "auto on off" -- "$cur")) ;;
                --to) [[ $n -ge 1 ]] && _tadoc_archive_paths "${pos[0]}" "$cur" ;;
                -j|--jobs|--shard-size|--memory) ;;
                *) if [[ $n -eq 0 ]]; then _tadoc_archives "$cur"
                   else _filedir 2>/dev/null || COMPREPLY=($(compgen -f -- "$cur")); fi ;;
            esac
            ;;
        compact)
            case $prev in
                --format) COMPREPLY=($(compgen -W "5 4" -- "$cur")) ;;
                --gpu) COMPREPLY=($(compgen -W "auto on off" -- "$cur")) ;;
                -j|--jobs|--shard-size|--memory) ;;
                *) [[ $n -eq 0 ]] && _tadoc_archives "$cur" ;;
            esac
            ;;
        ls|info|verify)
            if [[ $n -eq 0 ]]; then _tadoc_archives "$cur"
            elif [[ $cmd == ls && $n -eq 1 ]]; then _tadoc_archive_paths "${pos[0]}" "$cur"
            fi
            ;;
        cat)
            if [[ $n -eq 0 ]]; then _tadoc_archives "$cur"
            else _tadoc_archive_paths "${pos[0]}" "$cur"
            fi
            ;;
        extract)
            if [[ $n -eq 0 ]]; then _tadoc_archives "$cur"
            elif [[ $n -eq 1 ]]; then _tadoc_archive_paths "${pos[0]}" "$cur"
            fi
            ;;
        count|search|files|fuzzy)
            case $prev in -n|-k) return ;; -f) COMPREPLY=($(compgen -f -- "$cur")); return ;; --gpu) COMPREPLY=($(compgen -W "auto on off" -- "$cur")); return ;; esac
            if [[ $n -eq 0 ]]; then _tadoc_archives "$cur"
            elif [[ $n -eq 2 ]]; then _tadoc_archive_paths "${pos[0]}" "$cur"
            fi
            ;;
        top|vector|ngrams)
            case $prev in
                -n) [[ $cmd == ngrams ]] && COMPREPLY=($(compgen -W "2 3 4 5 6 7 8" -- "$cur")); return ;;
                --top) return ;;
            esac
            if [[ $n -eq 0 ]]; then _tadoc_archives "$cur"
            elif [[ $n -eq 1 ]]; then _tadoc_archive_paths "${pos[0]}" "$cur"
            fi
            ;;
        unpack|mount)
            if [[ $prev == -o ]]; then
                return
            elif [[ $n -eq 0 ]]; then _tadoc_archives "$cur"
            elif [[ $n -eq 1 ]]; then
                _filedir -d 2>/dev/null || COMPREPLY=($(compgen -d -- "$cur"))
            fi
            ;;
        config)
            case $prev in
                -c|--config) _filedir 2>/dev/null || COMPREPLY=($(compgen -f -- "$cur")) ;;
            esac
            ;;
    esac
}
complete -F _tadoc tadoc
